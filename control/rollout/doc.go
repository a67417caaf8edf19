// Package rollout is control's progressive delivery: rollout policies, the
// rollout state machine, and the strategist that runs it.
//
//   - Policies (policy.go, resolve.go, freeze.go): what a valid policy is
//     (Validate), the built-in ones (Default, Fast, GlobalBlast), freeze
//     windows, and how a policy resolves against the registered zones into
//     concrete stages (Resolve).
//   - Decisions, pure (step.go, decide.go, zones.go, witness.go,
//     analysis.go): from a rollout as stored, its stages, the evidence its
//     zones' distributors reported and the time, Start, Admit, Step and
//     Command return a Decision — the rollout as it should be, the goals to
//     move, the events that say why, an ending to roll back, a canary
//     analysis to start — with no I/O and no clock. The phase is explicit
//     (Rollout.state, stage, stage_applied_time, wait_until); Active is the
//     one "in flight" predicate. Their table and golden tests
//     (scenario_test.go, testdata/scenarios) need no etcd.
//   - The Strategist (strategist.go, loop.go): the I/O at the edge. While
//     it leads the election among control replicas it watches what a
//     decision depends on — namespace heads, rollouts, operator commands,
//     the distributors' zone status — and runs one loop per domain that
//     reads only the namespaces that changed or have a rollout in flight,
//     calls the decisions and applies each in one transaction guarded by
//     its leadership and by the namespace head it read (store.RolloutStep),
//     auditing every goal move and rollback as Author.
//
// Imported by control (which runs the strategist), control/service (which
// validates policies and serves rollouts), cmd/lehr (which describes
// policies and freezes) and testenv/devcluster (the fast policy of "lehr
// dev").
package rollout
