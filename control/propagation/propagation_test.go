package propagation

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func version(ns string, seq uint64, size int64, at time.Time) *lehrpb.VersionInfo {
	return &lehrpb.VersionInfo{Namespace: ns, Seq: seq, Parent: seq - 1, SizeBytes: size, CreateTime: timestamppb.New(at),
		Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}
}

// report is one distributor's counts: namespace, version, agents, ...
func report(id string, counts ...any) *lehrpb.DistributorStatus {
	d := &lehrpb.DistributorStatus{DistributorId: id}
	for i := 0; i+2 < len(counts); i += 3 {
		d.Versions = append(d.Versions, &lehrpb.VersionCount{Namespace: counts[i].(string), Version: uint64(counts[i+1].(int)), Agents: int32(counts[i+2].(int))})
	}
	return d
}

// step is one thing happening at t0 + at: a publish or an observation of
// zones' reports, and the results it must give ("ns@v outcome seconds
// class bucket met|missed|-").
type step struct {
	at      time.Duration
	publish *lehrpb.VersionInfo
	zones   map[string][]*lehrpb.DistributorStatus
	want    []string
}

func describe(r Result) string {
	judged := "-"
	switch {
	case r.Met():
		judged = "met"
	case r.Missed():
		judged = "missed"
	}
	return strings.Join([]string{r.Namespace + "@" + strconv.FormatUint(r.Version, 10), r.Outcome.String(), r.Propagation().String(), r.Class.Name, r.Bucket, judged}, " ")
}

func TestTracker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lim   Limits
		steps []step
	}{{
		name: "complete across zones once the last host reports it",
		steps: []step{
			{at: 0, publish: version("shop/web", 2, 1000, t0)},
			{at: 3 * time.Second, zones: map[string][]*lehrpb.DistributorStatus{
				"a": {report("d1", "shop/web", 2, 3)},
				"b": {report("d2", "shop/web", 1, 2, "shop/web", 2, 1)},
			}},
			{at: 12 * time.Second, zones: map[string][]*lehrpb.DistributorStatus{
				"a": {report("d1", "shop/web", 2, 3)},
				"b": {report("d2", "shop/web", 2, 3), report("d3", "other/ns", 1, 9)},
			}, want: []string{"shop/web@2 complete 12s small 2-10 met"}},
			// Nothing tracked any more.
			{at: 13 * time.Second, zones: map[string][]*lehrpb.DistributorStatus{"a": {report("d1", "shop/web", 2, 3)}}},
		},
	}, {
		name: "a later version held counts; late is missed; bucket and size class",
		steps: []step{
			{at: 0, publish: version("big/blob", 7, 5<<20, t0)},
			{at: 6 * time.Minute, zones: map[string][]*lehrpb.DistributorStatus{
				"a": {report("d1", "big/blob", 8, 600, "big/blob", 7, 500)},
			}, want: []string{"big/blob@7 complete 6m0s large 1001+ missed"}},
		},
	}, {
		name: "medium class, one host, objective is inclusive",
		steps: []step{
			{at: 0, publish: version("m/one", 2, 300<<10, t0)},
			{at: time.Minute, zones: map[string][]*lehrpb.DistributorStatus{"z": {report("d", "m/one", 2, 1)}},
				want: []string{"m/one@2 complete 1m0s medium 1 met"}},
		},
	}, {
		name: "a newer publish supersedes; the newer one is measured from its own publish",
		steps: []step{
			{at: 0, publish: version("shop/web", 2, 10, t0)},
			{at: 20 * time.Second, publish: version("shop/web", 3, 10, t0.Add(20*time.Second)),
				want: []string{"shop/web@2 superseded 20s small 1 missed"}},
			{at: 21 * time.Second, publish: version("shop/web", 2, 10, t0)}, // older: ignored
			{at: 25 * time.Second, zones: map[string][]*lehrpb.DistributorStatus{"a": {report("d1", "shop/web", 3, 4)}},
				want: []string{"shop/web@3 complete 5s small 2-10 met"}},
		},
	}, {
		name: "no subscriber: dropped after UnsubscribedAfter, judged on neither",
		lim:  Limits{UnsubscribedAfter: 10 * time.Second},
		steps: []step{
			{at: 0, publish: version("lonely/ns", 2, 10, t0)},
			{at: 5 * time.Second, zones: map[string][]*lehrpb.DistributorStatus{"a": {report("d1", "x/y", 1, 4)}}},
			{at: 11 * time.Second, zones: map[string][]*lehrpb.DistributorStatus{"a": {report("d1", "x/y", 1, 4)}},
				want: []string{"lonely/ns@2 unsubscribed 11s small 1 -"}},
		},
	}, {
		name: "a host that never applies it: timed out, missed",
		lim:  Limits{Timeout: time.Minute},
		steps: []step{
			{at: 0, publish: version("shop/web", 5, 10, t0)},
			{at: 61 * time.Second, zones: map[string][]*lehrpb.DistributorStatus{"a": {report("d1", "shop/web", 5, 10, "shop/web", 4, 1)}},
				want: []string{"shop/web@5 timeout 1m1s small 11-100 missed"}},
		},
	}, {
		name: "the in-flight bound evicts the oldest",
		lim:  Limits{MaxInFlight: 2},
		steps: []step{
			{at: 0, publish: version("a/one", 2, 10, t0)},
			{at: time.Second, publish: version("a/two", 2, 10, t0.Add(time.Second))},
			{at: 2 * time.Second, publish: version("a/three", 2, 10, t0.Add(2*time.Second)),
				want: []string{"a/one@2 evicted 2s small 1 -"}},
			{at: 3 * time.Second, zones: map[string][]*lehrpb.DistributorStatus{"a": {report("d", "a/one", 2, 1, "a/two", 2, 1, "a/three", 2, 1)}},
				want: []string{"a/three@2 complete 1s small 1 met", "a/two@2 complete 2s small 1 met"}},
		},
	}, {
		name: "a namespace's first version is not measured: nothing counts its subscribers yet",
		steps: []step{
			{at: 0, publish: &lehrpb.VersionInfo{Namespace: "new/ns", Seq: 1, CreateTime: timestamppb.New(t0)}},
			{at: time.Second, zones: map[string][]*lehrpb.DistributorStatus{"a": {report("d", "new/ns", 1, 1)}}},
		},
	}, {
		name: "a publishing replica's clock ahead: never negative",
		steps: []step{
			{at: 0, publish: version("skew/ns", 2, 10, t0.Add(3*time.Second))},
			{at: time.Second, zones: map[string][]*lehrpb.DistributorStatus{"a": {report("d", "skew/ns", 2, 2)}},
				want: []string{"skew/ns@2 complete 0s small 2-10 met"}},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.lim)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				var got []Result
				if s.publish != nil {
					got = tr.Publish(s.publish, now)
				} else {
					got = tr.Observe(s.zones, now)
				}
				var desc []string
				for _, r := range got {
					desc = append(desc, describe(r))
				}
				if strings.Join(desc, "\n") != strings.Join(s.want, "\n") {
					t.Errorf("step %d (t0+%v): got\n  %s\nwant\n  %s", i, s.at, strings.Join(desc, "\n  "), strings.Join(s.want, "\n  "))
				}
			}
		})
	}
}

func TestSizeClassAndBucket(t *testing.T) {
	for _, tc := range []struct {
		size int64
		want string
	}{{0, "small"}, {256 << 10, "small"}, {256<<10 + 1, "medium"}, {4 << 20, "medium"}, {4<<20 + 1, "large"}, {16 << 20, "large"}} {
		if got := SizeClass(tc.size).Name; got != tc.want {
			t.Errorf("SizeClass(%d) = %s, want %s", tc.size, got, tc.want)
		}
	}
	for n, want := range map[int]string{0: "1", 1: "1", 2: "2-10", 10: "2-10", 11: "11-100", 100: "11-100", 101: "101-1000", 1000: "101-1000", 1001: "1001+", 150000: "1001+"} {
		if got := SubscriberBucket(n); got != want {
			t.Errorf("SubscriberBucket(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 10; i++ {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	for p, want := range map[int]time.Duration{50: 5 * time.Second, 90: 9 * time.Second, 99: 10 * time.Second, 100: 10 * time.Second, 1: time.Second} {
		if got := Percentile(ds, p); got != want {
			t.Errorf("p%d of 1..10 s = %v, want %v", p, got, want)
		}
	}
	if got := Percentile(ds[:1], 99); got != time.Second {
		t.Errorf("p99 of one = %v", got)
	}
}

// Status groups the record's updates by class and by bucket, every group
// present; Metrics counts a complete result in its histogram and judges it.
func TestStatusAndMetrics(t *testing.T) {
	tr := NewTracker(Limits{})
	tr.Publish(version("a/x", 2, 10, t0), t0)
	tr.Publish(version("a/y", 2, 5<<20, t0), t0)
	res := tr.Observe(map[string][]*lehrpb.DistributorStatus{"z": {report("d", "a/x", 2, 3, "a/y", 2, 3)}}, t0.Add(20*time.Second))
	if len(res) != 2 {
		t.Fatalf("results %v", res)
	}
	rec := &lehrpb.PropagationRecord{}
	set := metrics.NewSet()
	m := NewMetrics(set, func() float64 { return 0 })
	for _, r := range res {
		m.Record(r)
		rec.Updates = append(rec.Updates, r.Proto())
	}
	st := Status(rec)
	if len(st.GetGroups()) != len(Classes)+len(Buckets) || len(st.GetClasses()) != len(Classes) {
		t.Fatalf("groups %d classes %d", len(st.GetGroups()), len(st.GetClasses()))
	}
	for _, g := range st.GetGroups() {
		var want, met int32
		switch {
		case g.GetSizeClass() == "small":
			want, met = 1, 0 // 20 s > 15 s
		case g.GetSizeClass() == "large":
			want, met = 1, 1
		case g.GetSubscribers() == "2-10":
			want, met = 2, 1
		}
		if g.GetCount() != want || g.GetMet() != met {
			t.Errorf("group %s%s: count %d met %d, want %d %d", g.GetSizeClass(), g.GetSubscribers(), g.GetCount(), g.GetMet(), want, met)
		}
		if want > 0 && g.GetP50().AsDuration() != 20*time.Second {
			t.Errorf("group %s%s: p50 %v, want 20s", g.GetSizeClass(), g.GetSubscribers(), g.GetP50().AsDuration())
		}
	}
	var sb strings.Builder
	set.WritePrometheus(&sb)
	out := sb.String()
	for _, line := range []string{
		`lehr_control_propagation_seconds_bucket{size_class="small",subscribers="2-10",le="15"} 0`,
		`lehr_control_propagation_seconds_bucket{size_class="small",subscribers="2-10",le="20"} 1`,
		`lehr_control_propagation_seconds_count{size_class="large",subscribers="2-10"} 1`,
		`lehr_control_propagation_seconds_count{size_class="medium",subscribers="1"} 0`,
		`lehr_control_propagation_objective_total{size_class="small",result="missed"} 1`,
		`lehr_control_propagation_objective_total{size_class="large",result="met"} 1`,
		`lehr_control_propagation_objective_total{size_class="small",result="met"} 0`,
		`lehr_control_propagation_incomplete_total{reason="evicted"} 0`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, out)
		}
	}
}
