// Package chaos is the kill matrix: Lehr run as real processes — control
// on its embedded etcd (or replicas on an external etcd, as testenv/ha
// runs them), distributors, agents, one binary built with crash points
// (Build) — under a workload of publishes and patches from racing
// producers, while a seeded schedule kills daemons with SIGKILL and fires
// named crash points inside them, each restarted as systemd would. Then it
// checks the invariants of ARCHITECTURE.md: every acknowledged version is
// in history exactly once, every agent converges to every goal within a
// bound, every file verifies, and no consumer saw a version go backwards
// or a torn view (Run, Report). It also measures how long a distributor
// kill delays the next update.
//
// TestKillMatrix runs a short matrix in "make test" and the long one under
// "make chaos" (-chaos.long). TestLossyLink runs an agent behind a lossy,
// slow link (testenv/faultnet). RunUpgrade is the rolling upgrade: the
// cluster started on binaries of the previous release (BuildCommit,
// UpgradeFrom), each process replaced by this tree's and rolled back,
// under the same workload and checks; TestRollingUpgrade runs it under
// "make upgrade" and "make chaos".
//
// Imported by testenv/ha and tests.
package chaos
