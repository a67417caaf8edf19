package control_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// testCtx is a context for one test step, generous for a loaded machine.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func prop(key, ct, value string) *lehrpb.Property {
	return &lehrpb.Property{Key: key, ContentType: ct, Value: []byte(value)}
}

func createDomain(t *testing.T, cl lehrpb.ControlClient, name string, q *lehrpb.Quotas) {
	t.Helper()
	if _, err := cl.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: name, Quotas: q}}); err != nil {
		t.Fatalf("CreateDomain(%s): %v", name, err)
	}
}

func publish(t *testing.T, cl lehrpb.ControlClient, ns string, props ...*lehrpb.Property) *lehrpb.VersionInfo {
	t.Helper()
	resp, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: ns, Properties: props, Author: "alice", Message: "test publish"})
	if err != nil {
		t.Fatalf("Publish(%s): %v", ns, err)
	}
	return resp.GetVersion()
}

// publishIdentified publishes as a caller control identifies (a client
// certificate, the unix socket), which asserts no author: control
// records the identity.
func publishIdentified(t *testing.T, cl lehrpb.ControlClient, ns string, props ...*lehrpb.Property) *lehrpb.VersionInfo {
	t.Helper()
	resp, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: ns, Properties: props, Message: "test publish"})
	if err != nil {
		t.Fatalf("Publish(%s): %v", ns, err)
	}
	return resp.GetVersion()
}

// checksumOf recomputes the canonical checksum of returned properties.
func checksumOf(t *testing.T, ps []*lehrpb.Property) string {
	t.Helper()
	s, err := content.New(content.FromProto(ps))
	if err != nil {
		t.Fatalf("content.New: %v", err)
	}
	return s.Checksum()
}

func getVersion(t *testing.T, cl lehrpb.ControlClient, ns string, v uint64, keys ...string) *lehrpb.GetResponse {
	t.Helper()
	resp, err := cl.Get(testCtx(t), &lehrpb.GetRequest{Namespace: ns, Version: v, Keys: keys})
	if err != nil {
		t.Fatalf("Get(%s@%d %v): %v", ns, v, keys, err)
	}
	return resp
}

// history returns every version, newest first, paging with pageSize.
func history(t *testing.T, cl lehrpb.ControlClient, ns string, pageSize int32) []*lehrpb.VersionInfo {
	t.Helper()
	var out []*lehrpb.VersionInfo
	tok := ""
	for {
		resp, err := cl.History(testCtx(t), &lehrpb.HistoryRequest{Namespace: ns, PageSize: pageSize, PageToken: tok})
		if err != nil {
			t.Fatalf("History(%s): %v", ns, err)
		}
		if pageSize > 0 && len(resp.GetVersions()) > int(pageSize) {
			t.Fatalf("History page holds %d versions, page_size %d", len(resp.GetVersions()), pageSize)
		}
		out = append(out, resp.GetVersions()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		tok = resp.GetNextPageToken()
	}
}

func seqs(vs []*lehrpb.VersionInfo) []uint64 {
	out := make([]uint64, len(vs))
	for i, v := range vs {
		out[i] = v.GetSeq()
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	ctx := testCtx(t)
	createDomain(t, cl, "shop", nil)
	const ns = "shop/frontend"

	v1 := publish(t, cl, ns,
		prop("limits/rps", "application/json", `{"rps": 100}`),
		prop("banner", "text/plain", "hello"),
		prop("flags.yaml", "application/yaml", "dark: true\n"),
	)
	if v1.GetSeq() != 1 || v1.GetSource() != lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT || v1.GetParent() != 0 {
		t.Errorf("first version = seq %d source %v parent %d, want 1 SNAPSHOT 0", v1.GetSeq(), v1.GetSource(), v1.GetParent())
	}
	if v1.GetAuthor() != "alice" || v1.GetMessage() != "test publish" || v1.GetPropertyCount() != 3 {
		t.Errorf("version info = %v, want author alice, message, 3 properties", v1)
	}
	if !strings.HasPrefix(v1.GetTransportIdentity(), "127.0.0.1:") {
		t.Errorf("transport identity = %q, want the peer address 127.0.0.1:port", v1.GetTransportIdentity())
	}

	got1 := getVersion(t, cl, ns, 0)
	if sum := checksumOf(t, got1.GetProperties()); sum != v1.GetChecksum() || got1.GetVersion().GetChecksum() != v1.GetChecksum() {
		t.Errorf("checksum of returned content = %s, version says %s, publish said %s", sum, got1.GetVersion().GetChecksum(), v1.GetChecksum())
	}
	if diff := cmp.Diff([]string{"banner", "flags.yaml", "limits/rps"}, keysOf(got1.GetProperties())); diff != "" {
		t.Errorf("Get keys (-want +got):\n%s", diff)
	}
	if got1.GetKind() != lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG {
		t.Errorf("kind = %v, want CONFIG (the default)", got1.GetKind())
	}

	// Patch: change one key, delete one, add one.
	presp, err := cl.Patch(ctx, &lehrpb.PatchRequest{
		Namespace: ns, BaseVersion: 1,
		Set:    []*lehrpb.Property{prop("limits/rps", "application/json", `{"rps": 200}`), prop("new", "", "x")},
		Delete: []string{"banner"},
		Author: "bob", Message: "raise rps",
	})
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	v2 := presp.GetVersion()
	if v2.GetSeq() != 2 || v2.GetParent() != 1 || v2.GetSource() != lehrpb.VersionSource_VERSION_SOURCE_PATCH || v2.GetAuthor() != "bob" {
		t.Errorf("patched version = %v, want seq 2 parent 1 PATCH by bob", v2)
	}
	got2 := getVersion(t, cl, ns, 2)
	if sum := checksumOf(t, got2.GetProperties()); sum != v2.GetChecksum() {
		t.Errorf("checksum of v2 content = %s, want %s", sum, v2.GetChecksum())
	}
	wantV2 := []*lehrpb.Property{prop("flags.yaml", "application/yaml", "dark: true\n"), prop("limits/rps", "application/json", `{"rps": 200}`), prop("new", "", "x")}
	if diff := cmp.Diff(wantV2, got2.GetProperties(), protocmp.Transform()); diff != "" {
		t.Errorf("v2 content (-want +got):\n%s", diff)
	}

	// Get of an older version and of some keys only.
	old := getVersion(t, cl, ns, 1, "limits/rps")
	if diff := cmp.Diff([]*lehrpb.Property{prop("limits/rps", "application/json", `{"rps": 100}`)}, old.GetProperties(), protocmp.Transform()); diff != "" {
		t.Errorf("Get v1 keys (-want +got):\n%s", diff)
	}

	// Diff.
	dresp, err := cl.Diff(ctx, &lehrpb.DiffRequest{Namespace: ns, From: 1, To: 2})
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	wantChanges := []*lehrpb.PropertyChange{
		{Key: "banner", Kind: lehrpb.PropertyChange_KIND_REMOVED, Old: prop("banner", "text/plain", "hello")},
		{Key: "limits/rps", Kind: lehrpb.PropertyChange_KIND_MODIFIED, Old: prop("limits/rps", "application/json", `{"rps": 100}`), New: prop("limits/rps", "application/json", `{"rps": 200}`)},
		{Key: "new", Kind: lehrpb.PropertyChange_KIND_ADDED, New: prop("new", "", "x")},
	}
	if diff := cmp.Diff(wantChanges, dresp.GetChanges(), protocmp.Transform()); diff != "" {
		t.Errorf("Diff 1..2 (-want +got):\n%s", diff)
	}

	// FetchDelta agrees with content.Diff and rebuilds v2 from v1.
	fd, err := cl.FetchDelta(ctx, &lehrpb.FetchDeltaRequest{Namespace: ns, From: 1, To: 2})
	if err != nil {
		t.Fatalf("FetchDelta: %v", err)
	}
	base, _ := content.New(content.FromProto(got1.GetProperties()))
	rebuilt, err := base.Apply(content.Patch{Set: content.FromProto(fd.GetSet()), Delete: fd.GetDelete()})
	if err != nil {
		t.Fatalf("apply delta: %v", err)
	}
	if rebuilt.Checksum() != v2.GetChecksum() {
		t.Errorf("v1 + delta checksum = %s, want v2's %s", rebuilt.Checksum(), v2.GetChecksum())
	}
	fv, err := cl.FetchVersion(ctx, &lehrpb.FetchVersionRequest{Namespace: ns, Version: 2})
	if err != nil {
		t.Fatalf("FetchVersion: %v", err)
	}
	if sum := checksumOf(t, fv.GetProperties()); sum != v2.GetChecksum() {
		t.Errorf("FetchVersion checksum = %s, want %s", sum, v2.GetChecksum())
	}

	// One more snapshot, then roll back to 1.
	publish(t, cl, ns, prop("only", "", "3"))
	rresp, err := cl.Rollback(ctx, &lehrpb.RollbackRequest{Namespace: ns, ToVersion: 1, Message: "bad rollout", Author: "carol"})
	if err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	v4 := rresp.GetVersion()
	if v4.GetSeq() != 4 || v4.GetSource() != lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK || v4.GetRollbackOf() != 1 || v4.GetParent() != 3 {
		t.Errorf("rollback version = %v, want seq 4 ROLLBACK of 1 with parent 3", v4)
	}
	if v4.GetChecksum() != v1.GetChecksum() {
		t.Errorf("rollback checksum = %s, want v1's %s", v4.GetChecksum(), v1.GetChecksum())
	}
	got4 := getVersion(t, cl, ns, 0)
	if diff := cmp.Diff(got1.GetProperties(), got4.GetProperties(), protocmp.Transform()); diff != "" {
		t.Errorf("content after rollback (-v1 +got):\n%s", diff)
	}

	// History, paged two ways.
	for _, size := range []int32{0, 1, 3} {
		h := history(t, cl, ns, size)
		if diff := cmp.Diff([]uint64{4, 3, 2, 1}, seqs(h)); diff != "" {
			t.Errorf("history with page_size %d (-want +got):\n%s", size, diff)
		}
	}
	h := history(t, cl, ns, 0)
	if h[0].GetAuthor() != "carol" || h[0].GetMessage() != "bad rollout" || h[2].GetAuthor() != "bob" {
		t.Errorf("history audit = %v / %v, want carol's rollback and bob's patch", h[0], h[2])
	}

	// Namespace head and listing.
	nsResp, err := cl.GetNamespace(ctx, &lehrpb.GetNamespaceRequest{Name: ns})
	if err != nil {
		t.Fatalf("GetNamespace: %v", err)
	}
	if nsResp.GetLatestVersion() != 4 || nsResp.GetLatestChecksum() != v1.GetChecksum() {
		t.Errorf("namespace head = %v, want latest 4 with v1's checksum", nsResp)
	}
	list, err := cl.ListNamespaces(ctx, &lehrpb.ListNamespacesRequest{Domain: "shop"})
	if err != nil {
		t.Fatalf("ListNamespaces: %v", err)
	}
	if len(list.GetNamespaces()) != 1 || list.GetNamespaces()[0].GetName() != ns {
		t.Errorf("ListNamespaces = %v, want [%s]", list.GetNamespaces(), ns)
	}
	doms, err := cl.ListDomains(ctx, &lehrpb.ListDomainsRequest{})
	if err != nil {
		t.Fatalf("ListDomains: %v", err)
	}
	if len(doms.GetDomains()) != 1 || doms.GetDomains()[0].GetName() != "shop" {
		t.Errorf("ListDomains = %v, want [shop]", doms.GetDomains())
	}
}

func keysOf(ps []*lehrpb.Property) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.GetKey()
	}
	return out
}

func TestIdempotentRetry(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	createDomain(t, cl, "idem", nil)
	req := &lehrpb.PublishRequest{Namespace: "idem/a", Properties: []*lehrpb.Property{prop("k", "", "v")}, RequestId: "req-1"}
	first, err := cl.Publish(testCtx(t), req)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	again, err := cl.Publish(testCtx(t), req)
	if err != nil {
		t.Fatalf("Publish retry: %v", err)
	}
	if diff := cmp.Diff(first.GetVersion(), again.GetVersion(), protocmp.Transform()); diff != "" {
		t.Errorf("retry with the same request_id returned a different version (-first +retry):\n%s", diff)
	}
	if got := seqs(history(t, cl, "idem/a", 0)); !cmp.Equal(got, []uint64{1}) {
		t.Errorf("history after a retried publish = %v, want [1]", got)
	}
	// A retried patch whose first attempt committed returns that version
	// even though its base is no longer the latest.
	preq := &lehrpb.PatchRequest{Namespace: "idem/a", BaseVersion: 1, Set: []*lehrpb.Property{prop("k", "", "w")}, RequestId: "req-2"}
	p1, err := cl.Patch(testCtx(t), preq)
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	p2, err := cl.Patch(testCtx(t), preq)
	if err != nil {
		t.Fatalf("Patch retry: %v", err)
	}
	if p1.GetVersion().GetSeq() != 2 || p2.GetVersion().GetSeq() != 2 {
		t.Errorf("patch and its retry = versions %d and %d, want 2 and 2", p1.GetVersion().GetSeq(), p2.GetVersion().GetSeq())
	}
	// Even after another producer published on top, the retries of both
	// are answered with their own versions and commit nothing (issue 8,
	// defect 3: before, the publish's retry committed its content again,
	// reverting the other producer's version, and the patch's retry
	// answered STALE_VERSION although it had committed).
	other := publish(t, cl, "idem/a", prop("k", "", "from another producer"))
	if v, err := cl.Publish(testCtx(t), req); err != nil || v.GetVersion().GetSeq() != 1 {
		t.Errorf("publish retry after another publish = %v, %v; want its own version 1", v.GetVersion(), err)
	}
	if v, err := cl.Patch(testCtx(t), preq); err != nil || v.GetVersion().GetSeq() != 2 {
		t.Errorf("patch retry after another publish = %v, %v; want its own version 2", v.GetVersion(), err)
	}
	if got := seqs(history(t, cl, "idem/a", 0)); !cmp.Equal(got, []uint64{other.GetSeq(), 2, 1}) {
		t.Errorf("history after the retries = %v, want [%d 2 1]: nothing committed again", got, other.GetSeq())
	}
}

func TestRestartKeepsState(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	ctx := testCtx(t)
	createDomain(t, cl, "keep", nil)
	if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatalf("CreateZone: %v", err)
	}
	for i := range 5 {
		publish(t, cl, "keep/one", prop("n", "application/json", fmt.Sprint(i)))
	}
	publish(t, cl, "keep/two", prop("x", "", "y"))
	if _, err := cl.Rollback(ctx, &lehrpb.RollbackRequest{Namespace: "keep/one", ToVersion: 2}); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	before := snapshotState(t, cl)
	if len(before.goals) != 2 {
		t.Fatalf("goals before restart = %v, want one per namespace", before.goals)
	}

	srv.Stop()
	srv2 := controltest.StartControl(t, control.Options{DataDir: srv.DataDir})
	after := snapshotState(t, srv2.Client)
	if diff := cmp.Diff(before, after, cmp.AllowUnexported(state{}), protocmp.Transform()); diff != "" {
		t.Errorf("state after restart (-before +after):\n%s", diff)
	}
}

// state is everything a restart must keep.
type state struct {
	history map[string][]*lehrpb.VersionInfo
	content map[string][]*lehrpb.Property // "ns@seq"
	goals   []*lehrpb.GoalState
	zones   []*lehrpb.Zone
}

func snapshotState(t *testing.T, cl lehrpb.ControlClient) state {
	t.Helper()
	ctx := testCtx(t)
	s := state{history: map[string][]*lehrpb.VersionInfo{}, content: map[string][]*lehrpb.Property{}}
	for _, ns := range []string{"keep/one", "keep/two"} {
		h := history(t, cl, ns, 2)
		s.history[ns] = h
		for _, v := range h {
			s.content[fmt.Sprintf("%s@%d", ns, v.GetSeq())] = getVersion(t, cl, ns, v.GetSeq()).GetProperties()
		}
	}
	g, err := cl.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: "zone-a"})
	if err != nil {
		t.Fatalf("GetGoals: %v", err)
	}
	s.goals = g.GetGoals()
	z, err := cl.ListZones(ctx, &lehrpb.ListZonesRequest{})
	if err != nil {
		t.Fatalf("ListZones: %v", err)
	}
	s.zones = z.GetZones()
	return s
}

func TestConcurrentPatchesFromSameBase(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	createDomain(t, cl, "race", nil)
	// A second connection: two independent producers.
	cl2 := lehrpb.NewControlClient(controltest.Dial(t, srv.Addr))
	base := publish(t, cl, "race/ns", prop("k", "", "0")).GetSeq()
	for round := range 5 {
		start := make(chan struct{})
		type result struct {
			v   *lehrpb.VersionInfo
			err error
		}
		results := make(chan result, 2)
		for i, c := range []lehrpb.ControlClient{cl, cl2} {
			go func() {
				<-start
				resp, err := c.Patch(testCtx(t), &lehrpb.PatchRequest{
					Namespace: "race/ns", BaseVersion: base,
					Set: []*lehrpb.Property{prop(fmt.Sprintf("p%d", i), "", fmt.Sprint(round))},
				})
				results <- result{resp.GetVersion(), err}
			}()
		}
		close(start)
		var won []*lehrpb.VersionInfo
		var lost []error
		for range 2 {
			r := <-results
			if r.err != nil {
				lost = append(lost, r.err)
			} else {
				won = append(won, r.v)
			}
		}
		if len(won) != 1 || len(lost) != 1 {
			t.Fatalf("round %d: %d patches won, %d lost (%v); want exactly one of each", round, len(won), len(lost), lost)
		}
		e := apierror.FromError(lost[0])
		if e.Code != codes.FailedPrecondition || e.Reason != apierror.ReasonStaleVersion || e.Field != "base_version" || e.CurrentVersion != won[0].GetSeq() {
			t.Errorf("round %d: loser got %v; want FAILED_PRECONDITION STALE_VERSION on base_version naming current version %d", round, e, won[0].GetSeq())
		}
		if !strings.Contains(e.Message, fmt.Sprintf("latest is %d", won[0].GetSeq())) {
			t.Errorf("round %d: conflict message %q does not name the current version %d", round, e.Message, won[0].GetSeq())
		}
		base = won[0].GetSeq()
	}
	if got := len(history(t, cl, "race/ns", 0)); got != 6 {
		t.Errorf("history holds %d versions, want 6 (1 publish + 5 winning patches)", got)
	}
}

// A watch that asks for deltas gets, with each goal event after the
// initial state, the small change from the replaced goal's version to the
// new one, equal to what FetchDelta answers; a large change, the initial
// state and a watch that does not ask get none.
func TestWatchGoalsDeltas(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	createDomain(t, cl, "w", nil)
	v1 := publish(t, cl, "w/a", prop("k", "", "1"), prop("x", "", "1"))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	watch := func(deltas bool) func() *lehrpb.GoalEvent {
		stream, err := cl.WatchGoals(ctx, &lehrpb.WatchGoalsRequest{Zone: "zone-w", CreateZone: true, Deltas: deltas})
		if err != nil {
			t.Fatalf("WatchGoals: %v", err)
		}
		return func() *lehrpb.GoalEvent {
			t.Helper()
			for {
				msg, err := stream.Recv()
				if err != nil {
					t.Fatalf("Recv: %v", err)
				}
				if len(msg.GetEvents()) == 0 {
					continue // progress
				}
				if len(msg.GetEvents()) != 1 {
					t.Fatalf("message %v: want one event", msg)
				}
				return msg.GetEvents()[0]
			}
		}
	}
	next, plain := watch(true), watch(false)
	if ev := next(); ev.GetDelta() != nil {
		t.Errorf("initial event carries a delta: %v", ev.GetDelta())
	}
	plain()

	big := strings.Repeat("v", 40<<10)
	prev := v1
	for _, tc := range []struct {
		name  string
		props []*lehrpb.Property
		want  bool // a delta
	}{
		{"one key changed", []*lehrpb.Property{prop("k", "", "2"), prop("x", "", "1")}, true},
		{"one key deleted", []*lehrpb.Property{prop("k", "", "2")}, true},
		{"40 KiB changed", []*lehrpb.Property{prop("k", "", big)}, false},
		{"a small change of a large version", []*lehrpb.Property{prop("k", "", "3")}, true},
		{"unchanged", []*lehrpb.Property{prop("k", "", "3")}, true},
	} {
		v := publish(t, cl, "w/a", tc.props...)
		ev := next()
		if ev.GetGoal().GetVersion() != v.GetSeq() {
			t.Fatalf("%s: event for version %d, want %d", tc.name, ev.GetGoal().GetVersion(), v.GetSeq())
		}
		if p := plain(); p.GetDelta() != nil {
			t.Errorf("%s: a watch that did not ask for deltas got one", tc.name)
		}
		d := ev.GetDelta()
		if !tc.want {
			if d != nil {
				t.Errorf("%s: delta %v, want none", tc.name, d)
			}
			prev = v
			continue
		}
		want, err := cl.FetchDelta(testCtx(t), &lehrpb.FetchDeltaRequest{Namespace: "w/a", From: prev.GetSeq(), To: v.GetSeq()})
		if err != nil {
			t.Fatal(err)
		}
		want.Kind = lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED // not sent: a namespace's kind never changes
		if diff := cmp.Diff(want, d, protocmp.Transform()); diff != "" {
			t.Errorf("%s: delta differs from FetchDelta's (-want +got):\n%s", tc.name, diff)
		}
		prev = v
	}
}

func TestWatchGoals(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	createDomain(t, cl, "w", nil)
	v1 := publish(t, cl, "w/a", prop("k", "", "1"))

	ctx, cancel := context.WithCancel(testCtx(t))
	stream, err := cl.WatchGoals(ctx, &lehrpb.WatchGoalsRequest{Zone: "zone-w", CreateZone: true})
	if err != nil {
		t.Fatalf("WatchGoals: %v", err)
	}
	msg, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv initial: %v", err)
	}
	if !msg.GetInitial() || !msg.GetInitialComplete() || len(msg.GetEvents()) != 1 {
		t.Fatalf("initial message = %v, want one initial, complete event", msg)
	}
	g := msg.GetEvents()[0].GetGoal()
	if g.GetNamespace() != "w/a" || g.GetVersion() != v1.GetSeq() || g.GetChecksum() != v1.GetChecksum() || g.GetZone() != "zone-w" {
		t.Errorf("initial goal = %v, want w/a at %d in zone-w", g, v1.GetSeq())
	}

	v2 := publish(t, cl, "w/a", prop("k", "", "2"))
	msg, err = stream.Recv()
	if err != nil {
		t.Fatalf("Recv change: %v", err)
	}
	if msg.GetInitial() || len(msg.GetEvents()) != 1 || msg.GetEvents()[0].GetType() != lehrpb.GoalEvent_TYPE_PUT ||
		msg.GetEvents()[0].GetGoal().GetVersion() != v2.GetSeq() || msg.GetEvents()[0].GetGoal().GetReason() != "publish" {
		t.Fatalf("change message = %v, want a PUT of w/a at %d with reason publish", msg, v2.GetSeq())
	}
	rev := msg.GetRevision()
	cancel()

	// Changes while nobody watches, then resume after rev.
	v3 := publish(t, cl, "w/a", prop("k", "", "3"))
	v4, err := cl.Rollback(testCtx(t), &lehrpb.RollbackRequest{Namespace: "w/a", ToVersion: 1})
	if err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	stream, err = cl.WatchGoals(testCtx(t), &lehrpb.WatchGoalsRequest{Zone: "zone-w", StartRevision: rev + 1})
	if err != nil {
		t.Fatalf("WatchGoals resume: %v", err)
	}
	var got []uint64
	var reasons []string
	for len(got) < 2 {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv after resume: %v", err)
		}
		if msg.GetInitial() || msg.GetRevision() <= rev {
			t.Fatalf("resumed stream sent %v; want only changes after revision %d", msg, rev)
		}
		for _, e := range msg.GetEvents() {
			got = append(got, e.GetGoal().GetVersion())
			reasons = append(reasons, e.GetGoal().GetReason())
		}
	}
	if diff := cmp.Diff([]uint64{v3.GetSeq(), v4.GetVersion().GetSeq()}, got); diff != "" {
		t.Errorf("resumed goal versions (-want +got):\n%s", diff)
	}
	if reasons[1] != "rollback to 1" {
		t.Errorf("rollback goal reason = %q, want %q", reasons[1], "rollback to 1")
	}

	// GetGoals agrees.
	gg, err := cl.GetGoals(testCtx(t), &lehrpb.GetGoalsRequest{Zone: "zone-w", Namespace: "w/a"})
	if err != nil {
		t.Fatalf("GetGoals: %v", err)
	}
	if len(gg.GetGoals()) != 1 || gg.GetGoals()[0].GetVersion() != v4.GetVersion().GetSeq() {
		t.Errorf("GetGoals = %v, want w/a at %d", gg.GetGoals(), v4.GetVersion().GetSeq())
	}
}

func TestHealthAndMetrics(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	createDomain(t, cl, "m", nil)
	publish(t, cl, "m/a", prop("k", "", "v"))
	_, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "m/a", Properties: []*lehrpb.Property{prop("../x", "", "v")}})
	if apierror.FromError(err).Reason != apierror.ReasonInvalidName {
		t.Fatalf("bad key publish: %v, want INVALID_NAME", err)
	}

	hc := healthpb.NewHealthClient(srv.Conn)
	wait.For(t, "gRPC health SERVING", func() bool {
		r, err := hc.Check(testCtx(t), &healthpb.HealthCheckRequest{Service: "lehr.v1.Control"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
	base := "http://" + srv.Control.MetricsAddr().String()
	wait.For(t, "/healthz 200", func() bool {
		code, _ := httpGet(t, base+"/healthz")
		return code == http.StatusOK
	})
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics status %d", code)
	}
	for _, want := range []string{
		`lehr_control_publishes_total{kind="snapshot"} 1`,
		`lehr_control_rejections_total{reason="INVALID_NAME"} 1`,
		`lehr_control_request_duration_seconds_bucket{method="Publish"`,
		`lehr_control_etcd_round_trips_total{op="txn"}`,
		`lehr_control_etcd_duration_seconds_bucket{op="get"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRefusesPlaintextOnNetwork(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:7400", ":7400", "10.1.2.3:7400", "[::]:7400"} {
		_, err := control.New(control.Options{Listen: addr})
		if !errors.Is(err, control.ErrPlaintextNotLoopback) {
			t.Errorf("New(Listen %q) = %v; want ErrPlaintextNotLoopback", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:7400", "[::1]:7400"} {
		if _, err := control.New(control.Options{Listen: addr}); err != nil {
			t.Errorf("New(Listen %q) = %v, want loopback accepted", addr, err)
		}
	}
}

func TestWatchGoalsRevisionGone(t *testing.T) {
	etcd, err := embedetcd.Start(testCtx(t), embedetcd.Options{Dir: t.TempDir(), Logger: controltest.Logger(t, slog.LevelWarn), NoSync: true})
	if err != nil {
		t.Fatalf("embedetcd.Start: %v", err)
	}
	t.Cleanup(func() { etcd.Close() })
	srv := controltest.StartControl(t, control.Options{EtcdEndpoints: etcd.Endpoints()})
	cl := srv.Client
	createDomain(t, cl, "gone", nil)
	if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-g"}); err != nil {
		t.Fatalf("CreateZone: %v", err)
	}
	publish(t, cl, "gone/a", prop("k", "", "1"))
	g, err := cl.GetGoals(testCtx(t), &lehrpb.GetGoalsRequest{Zone: "zone-g"})
	if err != nil {
		t.Fatalf("GetGoals: %v", err)
	}
	old := g.GetRevision()
	publish(t, cl, "gone/a", prop("k", "", "2"))

	// Compact etcd's history past the revision a client would resume at.
	cli, err := etcd.Client(testCtx(t))
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer cli.Close()
	// A write after the publish, so that the compaction also removes the
	// publish's own revision (a small publish is one revision, old + 1):
	// revisions below the compaction's are gone.
	latest, err := cli.Put(testCtx(t), "unrelated", "x")
	if err != nil {
		t.Fatalf("etcd put: %v", err)
	}
	if _, err := cli.Compact(testCtx(t), latest.Header.GetRevision()); err != nil {
		t.Fatalf("etcd compact: %v", err)
	}

	stream, err := cl.WatchGoals(testCtx(t), &lehrpb.WatchGoalsRequest{Zone: "zone-g", StartRevision: old + 1})
	if err != nil {
		t.Fatalf("WatchGoals: %v", err)
	}
	_, err = stream.Recv()
	e := apierror.FromError(err)
	if e == nil || e.Code != codes.OutOfRange || e.Reason != apierror.ReasonRevisionGone {
		t.Fatalf("resuming at a compacted revision: %v; want OUT_OF_RANGE REVISION_GONE", err)
	}
	// Restarting from 0 works and shows the latest goal.
	stream, err = cl.WatchGoals(testCtx(t), &lehrpb.WatchGoalsRequest{Zone: "zone-g"})
	if err != nil {
		t.Fatalf("WatchGoals from 0: %v", err)
	}
	msg, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if len(msg.GetEvents()) != 1 || msg.GetEvents()[0].GetGoal().GetVersion() != 2 {
		t.Errorf("initial state after restart from 0 = %v, want gone/a at 2", msg)
	}
}

// TestShutdownEndsWatches checks that stopping control ends open goal
// watches with UNAVAILABLE instead of waiting for them: with a shutdown
// timeout of an hour, a watch that held up the graceful stop would hang the
// test.
func TestShutdownEndsWatches(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{ShutdownTimeout: time.Hour})
	stream, err := srv.Client.WatchGoals(testCtx(t), &lehrpb.WatchGoalsRequest{Zone: "zone-s", CreateZone: true})
	if err != nil {
		t.Fatalf("WatchGoals: %v", err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("Recv initial: %v", err)
	}
	stopped := make(chan struct{})
	go func() {
		srv.Control.Close()
		close(stopped)
	}()
	_, err = stream.Recv()
	if e := apierror.FromError(err); e == nil || e.Code != codes.Unavailable {
		t.Errorf("watch during shutdown ended with %v; want UNAVAILABLE", err)
	}
	<-stopped
}
