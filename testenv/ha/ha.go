// Package ha is issue 29's high-availability suite, on real processes:
// an etcd cluster of three member processes (built from the etcd module
// Lehr embeds, BuildEtcd), two "lehr control" replicas on it, one zone
// with a distributor given both replicas' addresses, and two agents with
// a consumer each on every namespace — the daemons run and supervised as
// testenv/chaos runs them. Each Scenario writes to a global-blast
// namespace and a progressive one (a canary stage the strategist bakes)
// every half second through a producer given both replicas, does its
// fault — kill the etcd leader, kill the strategist's replica mid-canary,
// lose etcd's quorum, kill the control replica the distributor is
// connected to — and recovers; then it checks that no acknowledged write
// was lost or duplicated (against history) and that every agent and
// consumer converged, and measures how long the fault held delivery up
// (Result, Markdown). Figures are reported, never asserted.
//
// Last, TestHA restores the cluster from a backup as docs/operations.md
// says to restore an external etcd cluster, running its commands — etcdutl
// built from testenv/ha/etcdutl (BuildEtcdutl) on each member, then lehr
// control restore --record-only — and checks that every agent converges
// to the backup's content.
//
// TestHA runs a short version in "make test" and the long one under
// "make ha" (-ha.long), whose figures go to bench/results/<time>-ha.md
// and docs/operations.md.
//
// Only tests import ha.
package ha
