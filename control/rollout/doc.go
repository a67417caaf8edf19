// Package rollout is control's progressive delivery as pure decisions:
// rollout policies and the rollout state machine. The strategist that runs
// it against etcd is package control/strategist.
//
//   - Policies (policy.go, resolve.go, freeze.go): what a valid policy is
//     (Validate), the built-in ones (Default, Fast, GlobalBlast), freeze
//     windows, and how a policy resolves against the registered zones into
//     concrete stages (Resolve).
//   - Decisions, pure (step.go, decide.go, zones.go, witness.go,
//     analysis.go, alerts.go): from a rollout as stored, its stages, the evidence its
//     zones' distributors reported and the time, Start, Admit, Step and
//     Command return a Decision — the rollout as it should be, the goals to
//     move, the events that say why, an ending to roll back, a canary
//     analysis to start — with no I/O and no clock. The phase is explicit
//     (Rollout.state, stage, stage_applied_time, wait_until); Active is the
//     one "in flight" predicate. Their table and golden tests
//     (scenario_test.go, testdata/scenarios) need no etcd.
//   - The monitoring check (alerts.go): a policy's alerts, matched
//     against what control's alerts source reports (Alerts, an input
//     like the evidence), hold the stages that move their zones; what
//     holds a rollout is recorded in it (Rollout.alert_hold).
//   - At publish (publish.go): AtPublish decides which rollouts start in
//     their version's own commit rather than at the strategist's next
//     round — a global blast Start would enter at once — and starts them
//     as Start does.
//   - Evidence (evidence.go): Gather sums what the distributors of the
//     zones a rollout reached report, from their zone status, into what
//     Step decides on.
//
// control/strategist is the I/O at the edge: it watches what a decision
// depends on, reads it, calls these decisions and applies each in one
// guarded transaction.
//
// Imported by control/strategist (which runs it), control/service (which
// validates policies, serves rollouts and starts global blasts at
// publish), control/console (which shows rollouts as cmd/lehr does), cmd/lehr (which describes
// policies and freezes) and testenv/devcluster (the fast policy of "lehr
// dev").
package rollout
