// Package redistest starts and owns throwaway Redis servers for tests and
// demo programs.
//
// # Core API (no testing dependency)
//
// [StartServer] launches a private redis-server process on a free loopback
// port with persistence disabled and a temporary working directory. The
// returned [Server] can be killed, restarted on the same port, paused
// (SIGSTOP) and resumed (SIGCONT) to inject faults, and must be closed with
// [Server.Close]. [StartServers] starts several independent servers in
// parallel. [Attach] wraps a server somebody else runs; such a server is not
// owned and refuses fault injection with [ErrNotOwned].
//
// [StartSentinelGroup] starts a master, a replica and three Sentinels
// (redis-server --sentinel) with short failover timeouts; the group can fail
// over on demand ([SentinelGroup.Failover], SENTINEL FAILOVER) or by losing
// its master ([SentinelGroup.KillMaster]), and hands out rueidis Sentinel
// clients. [NewSentinelGroup] is its test wrapper. [StartReplicated] (test
// wrapper [NewReplicated]) starts a master with replicas of its own and no
// Sentinels, ready once WAIT counts every replica: pause a replica to keep it
// from acknowledging.
//
// [StartCluster] starts a Redis Cluster (masters with their replicas, in
// sync, cluster-node-timeout [ClusterNodeTimeout]); [NewCluster] is its test
// wrapper. A shard fails over on demand ([Cluster.Failover], CLUSTER FAILOVER
// with or without FORCE or TAKEOVER) or by losing its master
// ([Cluster.KillPrimary]), the killed node comes back as a replica
// ([Cluster.Rejoin]), and [Cluster.BlockReplication] keeps a master's writes
// from its replicas, as a lagging replica would; [Cluster.MoveSlot] reshards.
//
// # Test wrappers
//
// [New] returns a Redis for ordinary tests and registers its cleanup. It
// picks, in order:
//
//  1. the server named by the REDIS_ADDR environment variable (host:port),
//     shared and not owned, when the user set it;
//  2. a private redis-server process, when the binary is on PATH;
//  3. a private redis:7 container via testcontainers-go, when a Docker
//     engine answers (Docker is only probed when the binary is missing).
//     testcontainers runs in a helper program, the module in the dockerredis
//     directory, started with `go run` (so it needs the go command and this
//     package's source tree): its fifty-odd dependencies stay out of the
//     library's go.mod, and so out of its users' downloads;
//  4. otherwise the test fails with instructions; it is never skipped.
//
// [Owned] and [NewN] always return servers this process owns (binary, else
// container), never REDIS_ADDR, for tests that kill, pause or restart Redis.
// [Client] returns a rueidis client closed at cleanup, and [KeyPrefix] a
// per-test key prefix for tests that share a server.
//
// # Examples
//
// The Example functions of the module's packages are written to run when
// copied: they read REDIS_ADDR (and the quorum example [EnvQuorumAddrs]) and
// fall back to Redis's default address. [ServeExamples], called by TestMain,
// points those variables at servers of the test run unless the user set
// them, so that an example never reaches a machine's Redis on 6379; [New]
// tells such a REDIS_ADDR from the user's and ignores it.
//
// The well-known port 6379 is never chosen, and owned servers only listen on
// 127.0.0.1. A restarted server is checked to be our own process, not
// another server that took the port while ours was down.
//
// If the test process dies without cleaning up, Linux kills its redis-server
// children (parent-death signal), and the next process using this package
// removes their leftover temporary directories.
//
// # Leak checking
//
// [VerifyNoLeaks] is meant for TestMain: it runs the tests, then reports
// goroutines that are still alive after a short grace period and owned
// servers that were never closed.
package redistest
