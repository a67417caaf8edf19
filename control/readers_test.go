package control_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// Control serves a domain's content and goals only to distributors of
// the zones its readers admit (issue 28, item 4): a zone-a distributor is
// refused the content of a domain whose acl.readers name only zone-b, and
// its zone's goals leave that domain out — in GetGoals and in WatchGoals,
// events and deltas alike — until an admin adds zone-a to the readers,
// when its goal watch sends the domain's goals; taken off again, the watch
// deletes them; and a watch resumed from before a change does the same. A
// zone/host entry admits the host's zone; users read everything.
func TestDistributorsReadOnlyTheirReaders(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	admin := issue(t, ca, caKey, "admin", false)
	srv := controltest.StartControl(t, control.Options{Listen: "127.0.0.1:0", TLS: serverTLS, FleetAdmins: []string{"admin"}}, mtlsDial(pool, admin))
	ctx, cl := testCtx(t), srv.Client
	for _, d := range []*lehrpb.Domain{
		{Name: "open"},
		{Name: "bonly", Acl: &lehrpb.Acl{Readers: []string{"zone-b"}}},
		{Name: "hosta", Acl: &lehrpb.Acl{Readers: []string{"zone-b", "zone-a/web-1"}}},
	} {
		if _, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: d}); err != nil {
			t.Fatal(err)
		}
	}
	for _, z := range []string{"zone-a", "zone-b"} {
		if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: z}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"open/x", "bonly/x", "hosta/x"} {
		publishIdentified(t, cl, ns, prop("k", "", "1"))
	}
	distributor := func(zone, name string) lehrpb.ControlClient {
		return lehrpb.NewControlClient(controltest.Dial(t, srv.Addr, mtlsDial(pool, issueID(t, ca, caKey, name, false,
			tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: zone, Name: name}.URI()))))
	}
	distA, distB := distributor("zone-a", "dist-a"), distributor("zone-b", "dist-b")
	setReaders := func(readers ...string) {
		t.Helper()
		if _, err := cl.UpdateDomain(ctx, &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "bonly", Acl: &lehrpb.Acl{Readers: readers}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl"}}}); err != nil {
			t.Fatal(err)
		}
	}

	// Content and one namespace's goal: refused, saying why.
	for name, call := range map[string]func() error{
		"FetchVersion": func() error {
			_, err := distA.FetchVersion(ctx, &lehrpb.FetchVersionRequest{Namespace: "bonly/x", Version: 1})
			return err
		},
		"FetchDelta": func() error {
			_, err := distA.FetchDelta(ctx, &lehrpb.FetchDeltaRequest{Namespace: "bonly/x", From: 1})
			return err
		},
		"GetGoals of the namespace": func() error {
			_, err := distA.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: "zone-a", Namespace: "bonly/x"})
			return err
		},
	} {
		err := call()
		if e := apierror.FromError(err); err == nil || e.Code != codes.PermissionDenied ||
			!strings.Contains(e.Message, `domain "bonly"'s acl.readers (zone-b) admit no host of zone "zone-a"`) {
			t.Errorf("%s of bonly/x by a zone-a distributor: %v; want PERMISSION_DENIED naming the readers", name, err)
		}
	}
	for _, c := range []struct {
		cl lehrpb.ControlClient
		ns string
	}{{distA, "open/x"}, {distA, "hosta/x"}, {distB, "bonly/x"}, {cl, "bonly/x"}} {
		if _, err := c.cl.FetchVersion(ctx, &lehrpb.FetchVersionRequest{Namespace: c.ns, Version: 1}); err != nil {
			t.Errorf("FetchVersion of %s: %v", c.ns, err)
		}
	}
	goalsOf := func(c lehrpb.ControlClient, zone string) []string {
		t.Helper()
		resp, err := c.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: zone})
		if err != nil {
			t.Fatalf("GetGoals(%s): %v", zone, err)
		}
		var out []string
		for _, g := range resp.GetGoals() {
			out = append(out, g.GetNamespace())
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		who  string
		cl   lehrpb.ControlClient
		zone string
		want []string
	}{
		{"zone-a's distributor", distA, "zone-a", []string{"hosta/x", "open/x"}},
		{"zone-b's distributor", distB, "zone-b", []string{"bonly/x", "hosta/x", "open/x"}},
		{"a user", cl, "zone-a", []string{"bonly/x", "hosta/x", "open/x"}},
	} {
		if got := goalsOf(c.cl, c.zone); !slices.Equal(got, c.want) {
			t.Errorf("goals of %s seen by %s: %v, want %v", c.zone, c.who, got, c.want)
		}
	}

	// The goal watch: the initial state and the changes leave bonly out.
	w := watchGoals(t, distA, 0)
	if got := w.initial(); !slices.Equal(got, []string{"hosta/x", "open/x"}) {
		t.Errorf("initial goals of the watch: %v, want hosta/x and open/x", got)
	}
	publishIdentified(t, cl, "bonly/x", prop("k", "", "2"))
	publishIdentified(t, cl, "open/x", prop("k", "", "2"))
	if got := w.until(t, "open/x", false); len(got) != 1 || got[0].GetDelta() == nil {
		t.Errorf("the watch sent %v before open/x's new goal; want that goal alone, with its delta", got)
	}
	// Readers that come to admit zone-a: the watch sends bonly's goals, and
	// its content is served; readers that no longer do: deleted, refused.
	setReaders("zone-b", "zone-a/web-2")
	if got := w.until(t, "bonly/x", false); got[len(got)-1].GetGoal().GetVersion() != 2 {
		t.Errorf("bonly/x's goal when its readers admit zone-a: %v, want version 2", got)
	}
	if _, err := distA.FetchVersion(ctx, &lehrpb.FetchVersionRequest{Namespace: "bonly/x", Version: 2}); err != nil {
		t.Errorf("FetchVersion once the readers admit zone-a: %v", err)
	}
	publishIdentified(t, cl, "bonly/x", prop("k", "", "3"))
	if got := w.until(t, "bonly/x", false); got[len(got)-1].GetGoal().GetVersion() != 3 {
		t.Errorf("bonly/x's next goal: %v, want version 3", got)
	}
	setReaders("zone-b")
	w.until(t, "bonly/x", true)
	last := w.rev
	w.stop()

	// A watch resumed from before a change makes the same events.
	setReaders("zone-a")
	publishIdentified(t, cl, "hosta/x", prop("k", "", "2"))
	w = watchGoals(t, distA, last+1)
	got := w.until(t, "bonly/x", false)
	if got[len(got)-1].GetGoal().GetVersion() != 3 {
		t.Errorf("a resumed watch: bonly/x's goal %v, want version 3", got)
	}
	if !slices.ContainsFunc(got, func(ev *lehrpb.GoalEvent) bool { return ev.GetGoal().GetNamespace() == "hosta/x" }) {
		w.until(t, "hosta/x", false) // the goal watch and the domain watch are not ordered
	}
	w.stop()
}

// goalWatch reads one goal watch.
type goalWatch struct {
	st     grpc.ServerStreamingClient[lehrpb.WatchGoalsResponse]
	cancel context.CancelFunc
	rev    int64 // of the last message
}

func watchGoals(t *testing.T, cl lehrpb.ControlClient, from int64) *goalWatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := cl.WatchGoals(ctx, &lehrpb.WatchGoalsRequest{Zone: "zone-a", StartRevision: from, Deltas: true})
	if err != nil {
		t.Fatal(err)
	}
	return &goalWatch{st: st, cancel: cancel}
}

func (w *goalWatch) stop() { w.cancel() }

// recv returns the next message.
func (w *goalWatch) recv() (*lehrpb.WatchGoalsResponse, error) {
	m, err := w.st.Recv()
	if err == nil {
		w.rev = max(w.rev, m.GetRevision())
	}
	return m, err
}

// initial returns the namespaces of the initial state, sorted.
func (w *goalWatch) initial() []string {
	var out []string
	for {
		m, err := w.recv()
		if err != nil {
			return append(out, "error: "+err.Error())
		}
		for _, ev := range m.GetEvents() {
			out = append(out, ev.GetGoal().GetNamespace())
		}
		if m.GetInitialComplete() {
			slices.Sort(out)
			return out
		}
	}
}

// until returns the events received up to and including the first that
// puts (or, with deleted, deletes) the goal of ns. It fails the test on
// an event of a namespace of domain bonly before it, other than ns's.
func (w *goalWatch) until(t *testing.T, ns string, deleted bool) []*lehrpb.GoalEvent {
	t.Helper()
	var out []*lehrpb.GoalEvent
	for {
		m, err := w.recv()
		if err != nil {
			t.Fatalf("goal watch, waiting for %s: %v", ns, err)
		}
		for _, ev := range m.GetEvents() {
			out = append(out, ev)
			got := ev.GetGoal().GetNamespace()
			if got == ns && (ev.GetType() == lehrpb.GoalEvent_TYPE_DELETE) == deleted {
				return out
			}
			if strings.HasPrefix(got, "bonly/") && got != ns {
				t.Fatalf("goal watch sent %v while waiting for %s: bonly's readers do not admit zone-a", ev, ns)
			}
		}
	}
}
