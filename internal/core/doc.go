// Package core is the machinery shared by the module's primitives (the rlock
// Mutex, the semaphore): the Client state behind an rlock.Client, holds with
// their lease timers, the batched watchdog, and the pub/sub-driven wait loop.
//
// It is internal so that its shape can change freely; the public packages wrap
// it. A primitive plugs in by giving its holds a Kind, which knows how to renew
// a batch of them in Redis.
package core
