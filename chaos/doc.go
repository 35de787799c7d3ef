// Package chaos holds the fault-injection suite of this module; it has no
// API. Its tests (chaos_test.go) run rlock.Mutex, semaphore.Semaphore and
// rlock.RWMutex workloads in several worker processes against a real Redis
// while faults are injected (killed connections, a restarted or stalled
// server, paused holders, a cut-off watchdog, lost pub/sub messages, lost
// command replies, ACL rights revoked at run time, ForceUnlock under load, the
// master of the lock's slot killed on a Redis Cluster with replicas), and
// check the outcome: fenced writes, no Mutex token granted twice, no lost
// update, holders within the limit, no hold granted after a force-unlock with
// an older token, no stuck waiter, nothing left behind (every key gone, the
// fencing and arrival counters too; only a semaphore limit set by hand stays).
//
// The RWMutex workload (kind "rw") is mostly readers: every 8th operation
// (and every other long one) takes the write lock and makes a fenced
// read-modify-write; the others take the read lock and read the resource
// twice, on entering and at the end of the hold, under the token they share
// with the last writer. The checker asks, besides the Mutex's properties of
// the writes: in the order the resource accepted them, every read carries a
// token at or above every write before it and every write one above every
// read before it (no reader beside a writer, fenced); a reader whose two
// reads were accepted saw the same value; a writer found inside with anyone
// else (readers may share) pairs with one whose lease was lost; and every
// worker that tried to write got the write lock (no writer starved).
//
// The cluster-failover scenario (cluster_test.go) runs the Mutex workload on a
// 3-master cluster with one replica each, through rueidis cluster clients
// with rlock.WithReplicaAck, and kills the master of the lock's slot as a
// long hold begins (the first and third kill after cutting off its
// replication): its replica is elected and the killed node rejoins as a
// replica.
// -chaos.noack runs it without the acknowledgement, to see what it saves.
//
// A short version of most scenarios runs with go test ./... (for the
// RWMutex: conn-kill, holder-paused and redis-stalled); the full suite
// (with lost-replies and acl-revoked, which are full only, and a longer
// force-unlock)
// with
//
//	make chaos
//
// One scenario or a few run alone with -chaos.only, a regular expression
// matched against kind/name, for example
//
//	go test -race -count=1 -run '^TestChaos$' ./chaos -chaos.full -chaos.only='^mutex/force-unlock$'
//
// which prints a table of the figures (see RESULTS.md, and docs/guarantees.md
// for what they mean).
// The test binary re-executes itself as a worker process when the
// environment variable RELOCK_CHAOS_WORKER holds a worker configuration.
package chaos
