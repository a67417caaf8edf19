package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/policy"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// writePreview writes the preview namespace of ns with experiments, as
// control writes it (preview.Experiment as JSON, keyed by id).
func writePreview(tb testing.TB, dir, ns string, version uint64, exps map[string]preview.Experiment) {
	tb.Helper()
	var props []content.Property
	for id, e := range exps {
		b, err := json.Marshal(e)
		if err != nil {
			tb.Fatal(err)
		}
		props = append(props, content.Property{Key: id, Value: b, ContentType: "application/json"})
	}
	slices.SortFunc(props, func(a, b content.Property) int { return strings.Compare(a.Key, b.Key) })
	snap, err := content.New(props)
	if err != nil {
		tb.Fatal(err)
	}
	pns := names.Preview(ns)
	f := nsfile.FromVersion(content.Version{Namespace: pns, Seq: version, Checksum: snap.Checksum(), Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
		Info: &lehrpb.VersionInfo{Author: "control"}, Content: snap})
	if err := nsfile.Write(dir, f); err != nil {
		tb.Fatalf("write preview version %d: %v", version, err)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Shadow evaluation: the live decision is what Evaluate returns, whatever
// the experiments say; each experiment's result is counted exactly against
// it and disagreements are logged; a failing experiment rule counts as an
// error and a deny, never disturbing the live decision.
func TestShadowEvaluation(t *testing.T) {
	dir := t.TempDir()
	log := &lockedBuffer{}
	c, err := New(Options{Socket: filepath.Join(t.TempDir(), "absent.sock"), FilesDir: dir, RetryInterval: 50 * time.Millisecond,
		DecisionLog: log, PreviewSample: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	writePolicy(t, dir, 1, "all", `{"effect": "allow", "condition": "true"}`)
	writePreview(t, dir, ns, 1, map[string]preview.Experiment{
		"strict": {Name: "x/strict", Etag: "e1", LogPrefix: "PolicyPreviewLog", Rules: []preview.ExperimentRule{
			{Key: "all", Rule: policy.Rule{Effect: "allow", Condition: "true"}},
			{Key: "eve", Rule: policy.Rule{Effect: "deny", Condition: `principal.user == "eve"`}},
		}},
		"broken": {Name: "x/broken", Etag: "e2", LogPrefix: "PolicyPreviewLog", Rules: []preview.ExperimentRule{
			{Key: "size", Rule: policy.Rule{Effect: "allow", Condition: `request.size > 3`}},
		}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Subscribe(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	next(t, s, nil)
	wait.For(t, "both experiments previewing", func() bool { return len(s.Previewing()) == 2 })

	for range 3 {
		for _, u := range []string{"ana", "eve"} {
			d, err := s.Evaluate(ctx, policy.Input{Principal: map[string]any{"user": u}})
			if err != nil || d != (policy.Decision{Effect: policy.EffectAllow, Rule: "all"}) {
				t.Fatalf("live decision for %s: %+v, %v; want allow by all", u, d, err)
			}
		}
	}
	p := s.previewer()
	got := map[preview.Key][5]uint64{}
	p.counts.Range(func(k, v any) bool { got[k.(preview.Key)] = v.(*counter).snapshot(); return true })
	want := map[preview.Key][5]uint64{
		{Experiment: "strict", LiveEtag: "v1", ExperimentEtag: "e1"}: {3, 0, 3, 0, 0}, // allow→allow ana, allow→deny eve
		{Experiment: "broken", LiveEtag: "v1", ExperimentEtag: "e2"}: {0, 0, 6, 0, 6}, // fails closed: deny, with an error
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counts = %v; want %v", got, want)
	}
	if a, d := p.allows.Load(), p.denies.Load(); a != 6 || d != 0 {
		t.Errorf("live decisions counted: %d allowed, %d denied; want 6 and 0", a, d)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 9 { // 3 eve disagreements with strict, 6 with broken; agreements not sampled
		t.Fatalf("%d decision log lines; want 9:\n%s", len(lines), log.String())
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "PolicyPreviewLog {") || !strings.Contains(l, `"live_etag":"v1"`) {
			t.Errorf("log line %q", l)
		}
	}
}

// The comparison of a committed version with the version it replaced
// (preview.Comparison): a host at the committed version evaluates the
// replaced rules beside its live ones and counts the live decisions they
// would have decided otherwise — in both directions — which the agent
// keeps as policy_changed; a host still at the replaced version has
// nothing to compare and skips it. It is no experiment: Previewing does
// not list it, and no pair counts of it go up (an agent takes counts of
// experiments only).
func TestComparisonCountsChangedDecisions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		live        uint64
		wantChanged uint64
	}{
		{"at the committed version", 2, 2},
		{"at the replaced version", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c, err := New(Options{Socket: filepath.Join(t.TempDir(), "absent.sock"), FilesDir: dir, RetryInterval: 50 * time.Millisecond,
				DecisionLog: io.Discard, PreviewSample: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Version 2 denies eve where version 1 denied ana: one
			// decision in three flips each way, the deny share stays.
			writePolicy(t, dir, tc.live, "all", `{"effect": "allow", "condition": "true"}`, "eve", `{"effect": "deny", "condition": "principal.user == 'eve'"}`)
			writePreview(t, dir, ns, 1, map[string]preview.Experiment{
				preview.ComparisonKey: {Name: "domains/demo/policies/app", Etag: "v1", LogPrefix: preview.LogPrefix, Committed: 2, Rules: []preview.ExperimentRule{
					{Key: "all", Rule: policy.Rule{Effect: "allow", Condition: "true"}},
					{Key: "ana", Rule: policy.Rule{Effect: "deny", Condition: `principal.user == "ana"`}},
				}},
				"other": {Name: "x/other", Etag: "e1", LogPrefix: preview.LogPrefix, Rules: []preview.ExperimentRule{
					{Key: "all", Rule: policy.Rule{Effect: "allow", Condition: "true"}},
				}},
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := c.Subscribe(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			next(t, s, nil)
			wait.For(t, "the experiment previewing", func() bool { return len(s.Previewing()) == 1 })
			if got := s.Previewing(); got[0] != "x/other" {
				t.Errorf("Previewing() = %v; want the experiment only, not the comparison", got)
			}
			for _, u := range []string{"ana", "eve", "bob"} {
				if _, err := s.Evaluate(ctx, policy.Input{Principal: map[string]any{"user": u}}); err != nil {
					t.Fatal(err)
				}
			}
			p := s.previewer()
			if got := p.changed.Load(); got != tc.wantChanged {
				t.Errorf("changed decisions %d; want %d", got, tc.wantChanged)
			}
			var keys []preview.Key
			p.counts.Range(func(k, _ any) bool { keys = append(keys, k.(preview.Key)); return true })
			if want := (preview.Key{Experiment: "other", LiveEtag: preview.LiveEtag(tc.live), ExperimentEtag: "e1"}); len(keys) != 1 || keys[0] != want {
				t.Errorf("pairs counted %v; want the experiment's alone, %v", keys, want)
			}
		})
	}
}

// BenchmarkEvaluatePreview is one decision through the consumer library
// with 10 and 1,000 rules, with no experiment and with one experiment
// previewing (the live rules plus one; its agreements sampled 1 in 100 to
// io.Discard): what previewing costs a service per decision.
func BenchmarkEvaluatePreview(b *testing.B) {
	for _, n := range []int{10, 1000} {
		for _, exps := range []int{0, 1} {
			b.Run(fmt.Sprintf("rules=%d/experiments=%d", n, exps), func(b *testing.B) {
				dir := b.TempDir()
				var props []content.Property
				var rules []preview.ExperimentRule
				for i := range n - 1 {
					r := policy.Rule{Effect: "deny", Condition: fmt.Sprintf(`principal.team == "team-%d" && request.path.startsWith("/admin/%d")`, i, i)}
					rb, _ := json.Marshal(r)
					props = append(props, content.Property{Key: fmt.Sprintf("r%04d", i), Value: rb, ContentType: "application/json"})
					rules = append(rules, preview.ExperimentRule{Key: fmt.Sprintf("r%04d", i), Rule: r})
				}
				last := policy.Rule{Effect: "allow", Condition: `request.method in ["GET", "HEAD"] && principal.tier != "blocked"`}
				lb, _ := json.Marshal(last)
				props = append(props, content.Property{Key: "z-allow", Value: lb, ContentType: "application/json"})
				rules = append(rules, preview.ExperimentRule{Key: "z-allow", Rule: last},
					preview.ExperimentRule{Key: "z-block", Rule: policy.Rule{Effect: "deny", Condition: `principal.team == "blocked"`}})
				snap, err := content.New(props)
				if err != nil {
					b.Fatal(err)
				}
				f := nsfile.FromVersion(content.Version{Namespace: ns, Seq: 1, Checksum: snap.Checksum(), Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY,
					Info: &lehrpb.VersionInfo{Author: "bench"}, Content: snap})
				if err := nsfile.Write(dir, f); err != nil {
					b.Fatal(err)
				}
				if exps > 0 {
					writePreview(b, dir, ns, 1, map[string]preview.Experiment{"exp": {Name: "x/exp", Etag: "e", LogPrefix: "PolicyPreviewLog", Rules: rules}})
				}
				c, err := New(Options{Socket: filepath.Join(b.TempDir(), "absent.sock"), FilesDir: dir, DecisionLog: io.Discard,
					Logger: slog.New(slog.DiscardHandler), RetryInterval: 50 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				ctx := context.Background()
				s, err := c.Subscribe(ctx, ns)
				if err != nil {
					b.Fatal(err)
				}
				wait.For(b, "the policy and its experiments loaded", func() bool { return s.View().Version() == 1 && len(s.Previewing()) == exps })
				in := policy.Input{Request: map[string]any{"method": "GET", "path": "/api/orders"}, Principal: map[string]any{"team": "payments", "tier": "gold"}}
				b.ReportAllocs()
				for b.Loop() {
					d, err := s.Evaluate(ctx, in)
					if err != nil || !d.Allowed() {
						b.Fatalf("%+v, %v", d, err)
					}
				}
			})
		}
	}
}
