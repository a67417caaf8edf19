package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"lehr.dev/lehr/proto/lehrpb"
)

// The reads and the watch a distributor's goal watch keeps to its
// readers with: every domain's readers, one domain's goals in a zone, and
// every domain change since a revision with the record before and after.
func TestDomainReadersGoalsAndWatch(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	mustDomain(t, s, "open")
	if _, err := s.CreateDomain(ctx, &lehrpb.Domain{Name: "closed", Acl: &lehrpb.Acl{Readers: []string{"zone-b", "zone-a/h1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateZone(ctx, "zone-a"); err != nil {
		t.Fatal(err)
	}
	commit(t, s, Commit{Namespace: "open/x", Create: true, Content: snap(t, "k", "1")})
	commit(t, s, Commit{Namespace: "closed/x", Create: true, Content: snap(t, "k", "1")})
	commit(t, s, Commit{Namespace: "closed/y", Create: true, Content: snap(t, "k", "1")})

	readers, rev, err := s.DomainReaders(ctx)
	if err != nil {
		t.Fatalf("DomainReaders: %v", err)
	}
	if diff := cmp.Diff(map[string][]string{"open": nil, "closed": {"zone-b", "zone-a/h1"}}, readers); diff != "" || rev == 0 {
		t.Errorf("DomainReaders at %d (-want +got):\n%s", rev, diff)
	}
	gs, grev, err := s.DomainGoals(ctx, "zone-a", "closed")
	if err != nil {
		t.Fatalf("DomainGoals: %v", err)
	}
	if diff := cmp.Diff(map[string]uint64{"closed/x": 1, "closed/y": 1}, goalVersions(gs)); diff != "" || grev < rev {
		t.Errorf("DomainGoals at %d (-want +got):\n%s", grev, diff)
	}
	var nf *NotFoundError
	if _, _, err := s.DomainGoals(ctx, "zone-z", "closed"); !errors.As(err, &nf) {
		t.Errorf("DomainGoals of an unknown zone: %v, want NotFound", err)
	}

	wctx, cancel := testCtxTimeout(t, 30*time.Second)
	defer cancel()
	ch := s.WatchDomains(wctx, rev+1)
	if _, err := s.UpdateDomain(ctx, "closed", func(d *lehrpb.Domain) error { d.Acl.Readers = nil; return nil }); err != nil {
		t.Fatal(err)
	}
	mustDomain(t, s, "later")
	type change struct {
		name          string
		before, after []string
		created       bool
	}
	var got []change
	for len(got) < 2 {
		b := <-ch
		if b.Err != nil {
			t.Fatalf("WatchDomains: %v", b.Err)
		}
		for _, c := range b.Changes {
			got = append(got, change{c.Name, c.Before.GetAcl().GetReaders(), c.After.GetAcl().GetReaders(), c.Before == nil})
		}
	}
	want := []change{{"closed", []string{"zone-b", "zone-a/h1"}, nil, false}, {"later", nil, nil, true}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(change{})); diff != "" {
		t.Errorf("WatchDomains (-want +got):\n%s", diff)
	}
	if b := <-s.WatchDomains(wctx, 0); b.Err == nil || !errors.Is(b.Err, ErrInvalid) {
		t.Errorf("WatchDomains from 0: %v, want ErrInvalid", b.Err)
	}
}
