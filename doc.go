// Package relock is the root of the relock module: Redis-backed distributed
// locks for Go, built on rueidis. It contains no API of its own; the library
// lives in the subpackages:
//
//   - rlock: reentrant distributed mutexes (Redisson style) with a lease
//     watchdog, lease-loss signalling and fencing tokens;
//   - pubsub: the shared subscription multiplexer that lets waiters sleep
//     until an unlock message instead of polling.
package relock
