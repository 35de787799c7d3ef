// Package relock is the root of the relock module: Redis-backed distributed
// locks for Go, built on rueidis. It contains no API of its own; the library
// lives in the subpackages:
//
//   - rlock: reentrant distributed mutexes (Redisson style), read/write,
//     strictly fair and multi-name locks, and quorum (Redlock) locks, with a
//     lease watchdog, lease-loss signalling and fencing tokens;
//   - semaphore: a counting semaphore whose permits are leases and cannot
//     leak, and a non-reentrant one-permit lock, on an rlock Client;
//   - pubsub: the shared subscription multiplexer that lets waiters sleep
//     until a message instead of polling, usable on its own with any rueidis
//     client.
package relock
