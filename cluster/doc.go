// Package cluster ties together the proxies in front of the same databases.
//
// Production runs two or more proxies behind a TCP load balancer. They
// share, through a PostgreSQL control database (cluster.control; by
// default shard 0 of the first database), each database's topology — which
// database's shards a resharding cutover moved it to, under a generation
// number — so that:
//
//   - a cutover on any proxy pauses the database on every live proxy,
//     waits until all of them drained, switches all of them to the new
//     generation and resumes them (Cutover, handled by every Member);
//   - a proxy that starts, reconnects or reloads an older file follows the
//     generation the cluster recorded instead of undoing it (Overlay);
//   - a proxy that was stopped or cut off during a cutover is left out
//     after cluster.ack_timeout; the cutover's fence on the old shards
//     (package replication) keeps it from writing there, and it follows
//     the new generation when it reaches the control database again;
//   - each proxy's own pause in a cutover is observed in its metrics and
//     recorded in the control database (pauses.go), for SHOW CUTOVERS.
//
// Coordination uses only what PostgreSQL provides: rows (members,
// cutovers, acknowledgements, topology), one transaction as the commit
// point of a switch, LISTEN/NOTIFY to wake the members (with polling as
// the fallback: a notification is lost when a connection breaks), and the
// control database's own sessions for liveness — a member is live while
// its listening session is in pg_stat_activity. There is no protocol
// between proxies.
package cluster
