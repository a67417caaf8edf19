package propagation

import (
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/proto/lehrpb"
)

// KeepUpdates is how many of the most recent measured updates the record
// in etcd keeps (lehrpb.PropagationRecord): what the console's
// distribution is computed over.
const KeepUpdates = 500

// Status builds GetPropagationStatus's answer from the stored record
// (nil: nothing measured yet): the classes, the distribution per size
// class and per subscriber bucket over the record's updates, and the
// updates.
func Status(rec *lehrpb.PropagationRecord) *lehrpb.PropagationStatus {
	out := &lehrpb.PropagationStatus{Updates: rec.GetUpdates(), InFlight: rec.GetInFlight(), UpdateTime: rec.GetUpdateTime()}
	for _, c := range Classes {
		out.Classes = append(out.Classes, &lehrpb.PropagationClass{SizeClass: c.Name, MaxBytes: c.MaxBytes, Objective: durationpb.New(c.Objective)})
	}
	for _, c := range Classes {
		out.Groups = append(out.Groups, group(rec.GetUpdates(), func(u *lehrpb.PropagationUpdate) bool { return u.GetSizeClass() == c.Name }, c.Name, ""))
	}
	for _, b := range Buckets {
		out.Groups = append(out.Groups, group(rec.GetUpdates(), func(u *lehrpb.PropagationUpdate) bool { return u.GetSubscribers() == b.Label }, "", b.Label))
	}
	return out
}

// group is the distribution of the updates in.
func group(us []*lehrpb.PropagationUpdate, in func(*lehrpb.PropagationUpdate) bool, class, bucket string) *lehrpb.PropagationGroup {
	g := &lehrpb.PropagationGroup{SizeClass: class, Subscribers: bucket}
	var ds []time.Duration
	for _, u := range us {
		if !in(u) {
			continue
		}
		g.Count++
		if u.GetMetObjective() {
			g.Met++
		}
		ds = append(ds, u.GetPropagation().AsDuration())
	}
	if len(ds) == 0 {
		return g
	}
	slices.Sort(ds)
	g.P50, g.P90, g.P99 = durationpb.New(Percentile(ds, 50)), durationpb.New(Percentile(ds, 90)), durationpb.New(Percentile(ds, 99))
	g.Max = durationpb.New(ds[len(ds)-1])
	return g
}

// Percentile returns the p-th percentile of sorted (nearest rank): the
// smallest value at least p% of the values are at or below.
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 × n)
	return sorted[max(0, min(len(sorted), rank)-1)]
}
