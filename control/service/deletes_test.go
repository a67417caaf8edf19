package service

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// Who holds or subscribes to a namespace, zone by zone: per distributor
// the larger of its holders and its reporters, summed over the zone.
func TestSubscribers(t *testing.T) {
	const ns = "d/n"
	reports := map[string][]*lehrpb.DistributorStatus{
		"zone-b": {
			{Versions: []*lehrpb.VersionCount{{Namespace: ns, Version: 1, Agents: 2}, {Namespace: ns, Version: 2, Agents: 1}, {Namespace: "d/other", Version: 1, Agents: 9}}},
			// Subscribed, holding nothing yet: only its health says so.
			{Health: []*lehrpb.NamespaceHealth{{Namespace: ns, Agents: 4}}},
		},
		"zone-a": {
			{Versions: []*lehrpb.VersionCount{{Namespace: ns, Version: 2, Agents: 1}}, Health: []*lehrpb.NamespaceHealth{{Namespace: ns, Agents: 1}}},
		},
		"zone-c": {{Versions: []*lehrpb.VersionCount{{Namespace: "d/other", Version: 1, Agents: 3}}}},
	}
	got := subscribers(reports, ns)
	want := []zoneHosts{{"zone-a", 1}, {"zone-b", 7}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(zoneHosts{})); diff != "" {
		t.Errorf("subscribers (-want +got):\n%s", diff)
	}
}

// What refuses a namespace's deletion, and what force overrides.
func TestCheckNamespaceDeletion(t *testing.T) {
	const ns = "d/n"
	head := &lehrpb.Namespace{Name: ns, LatestVersion: 7}
	inUse := map[string][]*lehrpb.DistributorStatus{"zone-a": {{Versions: []*lehrpb.VersionCount{{Namespace: ns, Version: 7, Agents: 1}}}}}
	running := []*lehrpb.Rollout{
		{Id: ns + "@6", State: lehrpb.RolloutState_ROLLOUT_STATE_SUPERSEDED},
		{Id: ns + "@7", State: lehrpb.RolloutState_ROLLOUT_STATE_PAUSED},
	}
	ended := []*lehrpb.Rollout{{Id: ns + "@7", State: lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED}}
	for _, tc := range []struct {
		name   string
		etag   string
		force  bool
		st     store.DeletionState
		code   codes.Code
		reason string
		says   []string
	}{
		{name: "nothing in the way", st: store.DeletionState{Namespaces: []*lehrpb.Namespace{head}, Rollouts: ended}},
		{name: "its etag", etag: "v7", st: store.DeletionState{Namespaces: []*lehrpb.Namespace{head}}},
		{name: "a stale etag", etag: "v6", st: store.DeletionState{Namespaces: []*lehrpb.Namespace{head}},
			code: codes.Aborted, reason: apierror.ReasonEtagMismatch, says: []string{`"v7"`, "--etag v7", "without --etag"}},
		{name: "a stale etag, forced", etag: "v6", force: true, st: store.DeletionState{Namespaces: []*lehrpb.Namespace{head}},
			code: codes.Aborted, reason: apierror.ReasonEtagMismatch},
		{name: "in use", st: store.DeletionState{Namespaces: []*lehrpb.Namespace{head}, Reports: inUse},
			code: codes.FailedPrecondition, reason: apierror.ReasonNamespaceInUse, says: []string{"zone zone-a: 1 host", "lehr delete d/n --force"}},
		{name: "in use, forced", force: true, st: store.DeletionState{Namespaces: []*lehrpb.Namespace{head}, Reports: inUse}},
		{name: "a rollout in flight", st: store.DeletionState{Namespaces: []*lehrpb.Namespace{head}, Rollouts: running},
			code: codes.FailedPrecondition, reason: apierror.ReasonRolloutInFlight, says: []string{"d/n@7 is paused", "lehr rollout abort d/n", "lehr delete d/n --force"}},
		{name: "a rollout in flight, forced", force: true, st: store.DeletionState{Namespaces: []*lehrpb.Namespace{head}, Rollouts: running}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNamespaceDeletion(ns, tc.etag, tc.force, tc.st)
			if tc.code == codes.OK {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			e := apierror.FromError(err)
			if e == nil || e.Code != tc.code || e.Reason != tc.reason {
				t.Fatalf("err = %v; want %v/%s", err, tc.code, tc.reason)
			}
			for _, s := range tc.says {
				if !strings.Contains(e.Message, s) {
					t.Errorf("%q does not say %q", e.Message, s)
				}
			}
		})
	}
}

// A domain with namespaces is refused unless forced; a policy's preview
// namespace does not count (it goes with the policy).
func TestCheckDomainDeletion(t *testing.T) {
	d := &lehrpb.Domain{Name: "d", Etag: "r9"}
	nss := func(names ...string) []*lehrpb.Namespace {
		var out []*lehrpb.Namespace
		for _, n := range names {
			out = append(out, &lehrpb.Namespace{Name: n})
		}
		return out
	}
	if err := checkDomainDeletion("d", "r9", false, store.DeletionState{Domain: d, Namespaces: nss("d/p--preview")}); err != nil {
		t.Errorf("a domain with nothing but a preview namespace: %v", err)
	}
	err := checkDomainDeletion("d", "", false, store.DeletionState{Domain: d, Namespaces: nss("d/a", "d/b", "d/c", "d/e", "d/f", "d/g")})
	if e := apierror.FromError(err); e == nil || e.Reason != apierror.ReasonDomainNotEmpty ||
		!strings.Contains(e.Message, "6 namespaces (d/a, d/b, d/c, d/e, d/f, and 1 more)") || !strings.Contains(e.Message, "'lehr delete d/NAME' for each") {
		t.Errorf("a domain with 6 namespaces: %v", err)
	}
	if err := checkDomainDeletion("d", "", true, store.DeletionState{Domain: d, Namespaces: nss("d/a")}); err != nil {
		t.Errorf("forced: %v", err)
	}
	if e := apierror.FromError(checkDomainDeletion("d", "r8", true, store.DeletionState{Domain: d})); e == nil || e.Code != codes.Aborted {
		t.Errorf("a stale etag, forced: %v; want ABORTED", e)
	}
}
