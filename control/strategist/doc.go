// Package strategist runs control's rollouts: the I/O around package
// rollout's pure decisions. One control replica leads at a time (an etcd
// election); while it leads, the Strategist watches what a decision
// depends on — namespace heads, rollouts, operator commands, domain
// records, the distributors' zone status (store.WatchRolloutInputs) — and
// runs one loop per domain (loop.go) whose rounds read, at one revision,
// only the namespaces that changed and those with a rollout in flight,
// gather the evidence, call rollout.Start, Admit, Step and Command, and
// apply each Decision in one transaction guarded by its leadership and by
// the namespace head it read (store.RolloutStep): a newer publish or an
// operator's rollback since makes the round decide again, never write
// past it. It commits rollbacks, steps the canary evaluations, prunes old
// rollouts and audits every goal move and rollback as rollout.Author.
//
// It reaches etcd only through Store, the part of *store.Store it uses,
// and reads alerts for the monitoring check from control's alerts source
// (control/alerts), one read shared by every rollout.
//
// Imported by control.
package strategist
