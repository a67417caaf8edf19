package store

import (
	"testing"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

// TestWatchRolloutInputs checks that every change the strategist acts on
// reaches it, named as it should be: the watch in place first, then a
// new domain, a namespace's new head and a zone's report.
func TestWatchRolloutInputs(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	if _, err := s.CreateZone(ctx, "z1"); err != nil {
		t.Fatal(err)
	}
	inputs := s.WatchRolloutInputs(ctx)
	next := func(what string) RolloutInput {
		t.Helper()
		select {
		case in, ok := <-inputs:
			if !ok {
				t.Fatalf("waiting for %s: the channel closed", what)
			}
			return in
		case <-time.After(30 * time.Second):
			t.Fatalf("waiting for %s: nothing in 30 s", what)
		}
		return RolloutInput{}
	}
	if got := next("the watch in place"); got != (RolloutInput{Resync: true}) {
		t.Fatalf("first input = %+v, want a resync", got)
	}
	steps := []struct {
		name string
		do   func() error
		want RolloutInput
	}{
		{"a new domain", func() error {
			_, err := s.CreateDomain(ctx, &lehrpb.Domain{Name: "payments"})
			return err
		}, RolloutInput{Domain: "payments"}},
		{"a new version", func() error {
			_, err := s.Commit(ctx, Commit{Namespace: "payments/rules", Create: true, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Content: snap(t, "a", "1")})
			return err
		}, RolloutInput{Domain: "payments"}},
		{"a distributor's report", func() error {
			_, err := s.PutZoneStatus(ctx, "z1", report("dist-a", 1, "payments/rules", 1, 1), 30*time.Second, ReportLease{})
			return err
		}, RolloutInput{Zone: "z1"}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		// A step may change several keys of one kind (a commit writes
		// the head once); the first input after it must be the one.
		if got := next(st.name); got != st.want {
			t.Errorf("after %s: input %+v, want %+v", st.name, got, st.want)
		}
	}
}
