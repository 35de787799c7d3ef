// Package chaos holds the fault-injection suite of this module; it has no
// API. Its tests (chaos_test.go) run rlock.Mutex, semaphore.Semaphore and
// rlock.RWMutex workloads in several worker processes against a real Redis
// while faults are injected (killed connections, a restarted or stalled
// server, paused holders, a cut-off watchdog, lost pub/sub messages, lost
// command replies, ACL rights revoked at run time, ForceUnlock under load, the
// master of the lock's slot killed, stalled or failed over on a Redis Cluster
// with replicas or under Sentinel), and
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
// -chaos.functions runs every scenario's workers with their scripts as Redis
// functions (rlock.WithRedisFunctions(true)) instead of by EVALSHA.
//
// The full suite adds partial failures of that cluster and of Sentinel
// (partial_test.go, sentinel_test.go), each with the Mutex workload:
//
//   - cluster-master-stalled stops a master (SIGSTOP) until its replica has
//     taken over, then lets it go on: it comes back stale, with commands sent
//     to it meanwhile, and is demoted. Every other stall hits a master that
//     does not serve the lock; the notes show the workers going on.
//   - cluster-kill-watchdog kills the lock's master just before a watchdog
//     round of a hold that outlasts the lease: the renewals must be retried
//     on the promoted replica (the notes say how each such hold ended).
//   - cluster-dead-lowest and cluster-dead-lowest-other kill the node with
//     the lowest address (the first a client tries for a slot whose owner it
//     does not know) and keep it dead 5s before it rejoins; the lock is named
//     to live on it (each kill a failover; acknowledged acquisitions wait
//     meanwhile, the promoted master having no replica) or elsewhere (the
//     workers must start operations while it is dead).
//   - cluster-send-to-replicas is cluster-failover with cluster clients that
//     send read-only commands to replicas (rueidis SendToReplicas).
//   - sentinel-failover runs on a master with one replica watched by three
//     Sentinels, through rueidis Sentinel clients with WithReplicaAck, and
//     fails the master over by plan (SENTINEL FAILOVER) as long holds begin.
//
// On a cluster or a Sentinel group the leftover check asks every data
// server, replicas and demoted masters too, for subscriptions.
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
