// Package propagation measures how long each update takes to reach every
// host that subscribes to its namespace: from the publish (the version's
// create_time, set by the control replica that committed it) to the
// moment control sees, in the distributors' zone status reports
// (ReportZoneStatus → store.ZoneStatus), every subscribed host of every
// zone holding that version or a later one. It classifies each update by
// size (SizeClass) and by the number of subscribed hosts
// (SubscriberBucket), judges it against its size class's objective
// (Classes), and exports the result as histograms and counters
// (Metrics) and as the record of the recent updates that
// GetPropagationStatus and the console's Propagation page show
// (Summarize).
//
// The Tracker is pure: what was published and what the reports say go
// in, with the time; completed measurements come out. Run is its I/O: the
// leader of the rollout strategist runs it (control wires it to
// strategist.Options.Leading), so exactly one replica measures at a time
// and every measurement is counted once; it reads everything from etcd,
// so it sees every distributor's report whichever replica received it.
//
// Imported by control and control/service.
package propagation

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// Class is an update size class: versions of at most MaxBytes (0: no
// bound) and more than the previous class's bound, and the time within
// which every subscribed host should hold one.
type Class struct {
	Name      string
	MaxBytes  int64
	Objective time.Duration
}

// Classes are the size classes, smallest first. UCDP's SLA has small,
// medium and large classes by update size, the large with no guarantee;
// ours are by the version's size (VersionInfo.size_bytes: keys and
// values, what every host writes, a patch as much as a snapshot), with
// bounds at 256 KiB and 4 MiB (a namespace holds at most 16 MiB,
// validate.MaxNamespaceBytes). The objectives include the report path's
// delay: control learns that a host holds a version from its
// distributor's next report (every 10 s by default), so a measurement is
// the true time plus up to one report interval.
var Classes = []Class{
	{Name: "small", MaxBytes: 256 << 10, Objective: 15 * time.Second},
	{Name: "medium", MaxBytes: 4 << 20, Objective: time.Minute},
	{Name: "large", MaxBytes: 0, Objective: 5 * time.Minute},
}

// Buckets are the subscriber buckets: the upper bound of hosts of each
// (0: no bound) and its label.
var Buckets = []struct {
	Max   int
	Label string
}{{1, "1"}, {10, "2-10"}, {100, "11-100"}, {1000, "101-1000"}, {0, "1001+"}}

// SizeClass returns the class of a version of size bytes.
func SizeClass(size int64) Class {
	for _, c := range Classes {
		if c.MaxBytes == 0 || size <= c.MaxBytes {
			return c
		}
	}
	return Classes[len(Classes)-1]
}

// SubscriberBucket returns the label of the bucket of n subscribed hosts.
func SubscriberBucket(n int) string {
	for _, b := range Buckets {
		if b.Max == 0 || n <= b.Max {
			return b.Label
		}
	}
	return Buckets[len(Buckets)-1].Label
}

// Defaults of Limits.
const (
	// DefaultMaxInFlight bounds the versions tracked at once.
	DefaultMaxInFlight = 10_000
	// DefaultTimeout is how long a version is tracked before it is given
	// up as incomplete (a host that never applies it, a zone gone silent).
	DefaultTimeout = time.Hour
	// DefaultUnsubscribedAfter is how long a version whose namespace no
	// reporting host subscribes to is tracked: long enough for every
	// distributor to report after the publish (a report lives at most
	// 120 s; they come every 10 s by default).
	DefaultUnsubscribedAfter = 2 * time.Minute
)

// Limits bound a Tracker. Zero fields mean the defaults.
type Limits struct {
	// MaxInFlight bounds the versions tracked at once. When a publish
	// finds it full, the oldest tracked version is dropped (Outcome
	// Evicted): the oldest is the one most likely stuck, and the newest
	// are the ones still measurable.
	MaxInFlight int
	// Timeout: a version not on every subscribed host after this long is
	// dropped (Outcome TimedOut); it missed its objective.
	Timeout time.Duration
	// UnsubscribedAfter: a version that no reporting host subscribes to
	// this long after its publish is dropped (Outcome Unsubscribed).
	UnsubscribedAfter time.Duration
}

// Outcome is how a tracked version left the tracker.
type Outcome int

const (
	// Complete: every subscribed host holds it or a later version.
	Complete Outcome = iota
	// Superseded: a later version of its namespace was published first;
	// the later one is measured instead.
	Superseded
	// TimedOut: Limits.Timeout passed first.
	TimedOut
	// Evicted: dropped for a newer publish when Limits.MaxInFlight were
	// tracked.
	Evicted
	// Unsubscribed: no reporting host subscribes to its namespace.
	Unsubscribed
)

// String is the outcome's label in lehr_control_propagation_incomplete_total.
func (o Outcome) String() string {
	switch o {
	case Complete:
		return "complete"
	case Superseded:
		return "superseded"
	case TimedOut:
		return "timeout"
	case Evicted:
		return "evicted"
	case Unsubscribed:
		return "unsubscribed"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Result is one version's measurement.
type Result struct {
	Namespace string
	Version   uint64
	Source    lehrpb.VersionSource
	SizeBytes int64
	Class     Class
	// Subscribers is the number of hosts subscribed to the namespace at
	// the last report read (when it completed), and Bucket its label.
	Subscribers int
	Bucket      string
	Published   time.Time
	// Done is when the tracker saw it complete, or dropped it.
	Done    time.Time
	Outcome Outcome
}

// Propagation is Done - Published, never negative (the publishing
// replica's clock may be ahead of the measuring one's).
func (r Result) Propagation() time.Duration { return max(0, r.Done.Sub(r.Published)) }

// Met says whether the version reached every subscribed host within its
// class's objective. Only a Complete one can have.
func (r Result) Met() bool { return r.Outcome == Complete && r.Propagation() <= r.Class.Objective }

// Missed says whether it is known to have missed its objective: it
// completed late, or was dropped later than the objective.
func (r Result) Missed() bool { return !r.Met() && r.Propagation() > r.Class.Objective }

// Proto is r as the API's PropagationUpdate (of a Complete result).
func (r Result) Proto() *lehrpb.PropagationUpdate {
	return &lehrpb.PropagationUpdate{Namespace: r.Namespace, Version: r.Version, Source: r.Source, SizeBytes: r.SizeBytes,
		SizeClass: r.Class.Name, SubscribedHosts: int32(r.Subscribers), Subscribers: r.Bucket,
		PublishTime: timestamppb.New(r.Published), CompleteTime: timestamppb.New(r.Done),
		Propagation: durationpb.New(r.Propagation()), MetObjective: r.Met()}
}

// tracked is a version in flight.
type tracked struct {
	info        *lehrpb.VersionInfo
	published   time.Time
	subscribers int
}

// Tracker follows published versions until every subscribed host holds
// them. Not safe for concurrent use.
type Tracker struct {
	lim Limits
	// byNS holds the version in flight of each namespace: a publish
	// supersedes the one before.
	byNS map[string]*tracked
}

// NewTracker returns an empty Tracker bounded by lim.
func NewTracker(lim Limits) *Tracker {
	if lim.MaxInFlight <= 0 {
		lim.MaxInFlight = DefaultMaxInFlight
	}
	if lim.Timeout <= 0 {
		lim.Timeout = DefaultTimeout
	}
	if lim.UnsubscribedAfter <= 0 {
		lim.UnsubscribedAfter = DefaultUnsubscribedAfter
	}
	return &Tracker{lim: lim, byNS: map[string]*tracked{}}
}

// InFlight returns the number of versions tracked.
func (t *Tracker) InFlight() int { return len(t.byNS) }

// Tracking says whether version v of ns, or a later one, is tracked.
func (t *Tracker) Tracking(ns string, v uint64) bool {
	tr := t.byNS[ns]
	return tr != nil && tr.info.GetSeq() >= v
}

// Publish starts tracking version v at now. A version no newer than the
// one tracked for its namespace is ignored, and so is a namespace's first
// version (no parent): distributors count a host under a namespace only
// once it holds a version of it, so before the first version nothing says
// how many hosts subscribe, and "every subscribed host" would be the
// first one to report. An older version tracked is superseded, and when
// Limits.MaxInFlight are tracked the oldest is evicted: both are
// returned.
func (t *Tracker) Publish(v *lehrpb.VersionInfo, now time.Time) []Result {
	ns := v.GetNamespace()
	if v.GetParent() == 0 {
		return nil
	}
	var out []Result
	if old := t.byNS[ns]; old != nil {
		if old.info.GetSeq() >= v.GetSeq() {
			return nil
		}
		out = append(out, t.drop(ns, now, Superseded))
	}
	if len(t.byNS) >= t.lim.MaxInFlight {
		var oldest string
		for n, tr := range t.byNS {
			if o := t.byNS[oldest]; o == nil || tr.published.Before(o.published) || (tr.published.Equal(o.published) && n < oldest) {
				oldest = n
			}
		}
		out = append(out, t.drop(oldest, now, Evicted))
	}
	t.byNS[ns] = &tracked{info: v, published: v.GetCreateTime().AsTime()}
	return out
}

// drop stops tracking ns's version with outcome o.
func (t *Tracker) drop(ns string, now time.Time, o Outcome) Result {
	tr := t.byNS[ns]
	delete(t.byNS, ns)
	return t.result(tr, now, o)
}

func (t *Tracker) result(tr *tracked, now time.Time, o Outcome) Result {
	c := SizeClass(tr.info.GetSizeBytes())
	return Result{Namespace: tr.info.GetNamespace(), Version: tr.info.GetSeq(), Source: tr.info.GetSource(), SizeBytes: tr.info.GetSizeBytes(),
		Class: c, Subscribers: tr.subscribers, Bucket: SubscriberBucket(tr.subscribers), Published: tr.published, Done: now, Outcome: o}
}

// Observe looks at every zone's live distributor reports (zones: by zone,
// as store.ZoneStatus returns them; a zone missing has no live report)
// at now, and returns the versions that left the tracker: those every
// subscribed host holds (or a later version of) — Complete — and those
// timed out or unsubscribed, in namespace order.
//
// A namespace's subscribed hosts are the agents its distributors count
// at any version of it (VersionCount); a host holds version v when it is
// counted at v or later.
func (t *Tracker) Observe(zones map[string][]*lehrpb.DistributorStatus, now time.Time) []Result {
	if len(t.byNS) == 0 {
		return nil
	}
	type count struct{ subscribed, held int }
	counts := map[string]*count{}
	for _, sts := range zones {
		for _, d := range sts {
			for _, vc := range d.GetVersions() {
				tr := t.byNS[vc.GetNamespace()]
				if tr == nil || vc.GetAgents() <= 0 {
					continue
				}
				c := counts[vc.GetNamespace()]
				if c == nil {
					c = &count{}
					counts[vc.GetNamespace()] = c
				}
				c.subscribed += int(vc.GetAgents())
				if vc.GetVersion() >= tr.info.GetSeq() {
					c.held += int(vc.GetAgents())
				}
			}
		}
	}
	var out []Result
	for ns, tr := range t.byNS {
		c := counts[ns]
		if c == nil {
			c = &count{}
		}
		tr.subscribers = c.subscribed
		age := now.Sub(tr.published)
		switch {
		case c.subscribed > 0 && c.held == c.subscribed:
			out = append(out, t.drop(ns, now, Complete))
		case age > t.lim.Timeout:
			out = append(out, t.drop(ns, now, TimedOut))
		case c.subscribed == 0 && age > t.lim.UnsubscribedAfter:
			out = append(out, t.drop(ns, now, Unsubscribed))
		}
	}
	slices.SortFunc(out, func(a, b Result) int { return cmp.Compare(a.Namespace, b.Namespace) })
	return out
}
