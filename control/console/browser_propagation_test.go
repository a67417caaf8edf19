package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// The Propagation page of a dev cluster whose six hosts subscribe to two
// namespaces, after updates of each: every figure of the page — per size
// class and per subscriber bucket the count, the met, the share and the
// percentiles, and each recent update's hosts and time — is what
// GetPropagationStatus answers, and the page loads without an error.
func TestBrowserPropagation(t *testing.T) {
	b := newBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := devcluster.Start(ctx, devcluster.Options{Zones: []string{"zone-a", "zone-b"}, AgentsPerZone: 3, Domains: []string{"shop"},
		ControlHTTPListen: "127.0.0.1:0", Rollouts: true, RolloutInterval: 100 * time.Millisecond, ReportInterval: 200 * time.Millisecond,
		NoSync: true, Logger: controltest.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	base := "http://" + c.ControlHTTPAddr()
	prod := c.Producer()
	api := prod.RPC()
	if _, err := prod.SetRolloutPolicy(ctx, "shop", &lehrpb.RolloutPolicy{GlobalBlast: true}, "every zone at once", 0); err != nil {
		t.Fatal(err)
	}
	// shop/web on every host, shop/cart on one host of zone-a.
	subs := map[string]int{"shop/web": 3, "shop/cart": 1}
	for _, z := range c.Zones() {
		for i := range 3 {
			cl, err := c.Consumer(z, i)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close() })
			for ns, n := range subs {
				if i < n && (ns == "shop/web" || z == "zone-a") {
					if _, err := cl.Subscribe(ctx, ns); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	publish := func(ns, v string) {
		if _, err := prod.Publish(ctx, ns, []producer.Property{{Key: "limit", Value: []byte(v)}}); err != nil {
			t.Fatal(err)
		}
	}
	hosts := map[string]int{"shop/web": 6, "shop/cart": 1}
	for ns := range hosts {
		publish(ns, "1")
	}
	wait.For(t, "every subscribed host at version 1", func() bool {
		return hostsAt(t, api, "zone-a", "shop/web", 1)+hostsAt(t, api, "zone-b", "shop/web", 1) == 6 && hostsAt(t, api, "zone-a", "shop/cart", 1) == 1
	})
	var st *lehrpb.PropagationStatus
	for i, v := range []string{"2", "3"} {
		for ns := range hosts {
			publish(ns, v)
		}
		wait.For(t, fmt.Sprintf("%d updates measured", 2*(i+1)), func() bool {
			var err error
			st, err = api.GetPropagationStatus(ctx, &lehrpb.GetPropagationStatusRequest{})
			return err == nil && len(st.GetUpdates()) == 2*(i+1)
		})
	}
	for _, u := range st.GetUpdates() {
		if int(u.GetSubscribedHosts()) != hosts[u.GetNamespace()] {
			t.Errorf("%s@%d measured on %d hosts, want %d", u.GetNamespace(), u.GetVersion(), u.GetSubscribedHosts(), hosts[u.GetNamespace()])
		}
	}

	b.open(base+"/console/propagation", "propagation")
	secs := func(d *durationpb.Duration) string {
		if d == nil {
			return "—"
		}
		return fmt.Sprintf("%.1f s", d.AsDuration().Seconds())
	}
	share := func(g *lehrpb.PropagationGroup) string {
		if g.GetCount() == 0 {
			return "—"
		}
		return fmt.Sprintf("%d%%", g.GetMet()*100/g.GetCount())
	}
	counted := 0
	for _, g := range st.GetGroups() {
		row := `#buckets tr[data-bucket="` + g.GetSubscribers() + `"] `
		if g.GetSizeClass() != "" {
			row = `#classes tr[data-class="` + g.GetSizeClass() + `"] `
			counted += int(g.GetCount())
		}
		for field, want := range map[string]string{"count": strconv.Itoa(int(g.GetCount())), "met": strconv.Itoa(int(g.GetMet())), "share": share(g),
			"p50": secs(g.GetP50()), "p90": secs(g.GetP90()), "p99": secs(g.GetP99()), "max": secs(g.GetMax())} {
			if got := b.text(row + `[data-field="` + field + `"]`); got != want {
				t.Errorf("propagation page: %s%s's %s is %q; GetPropagationStatus says %q", g.GetSizeClass(), g.GetSubscribers(), field, got, want)
			}
		}
	}
	if counted != 4 {
		t.Errorf("the size classes count %d updates, want 4", counted)
	}
	for _, cl := range st.GetClasses() {
		if got := b.text(`#classes tr[data-class="` + cl.GetSizeClass() + `"] [data-field="objective"]`); got != secs(cl.GetObjective()) {
			t.Errorf("propagation page: %s's objective %q; the API says %s", cl.GetSizeClass(), got, secs(cl.GetObjective()))
		}
	}
	if n := b.count(`#updates tbody tr`); n != len(st.GetUpdates()) {
		t.Errorf("propagation page lists %d updates; GetPropagationStatus %d", n, len(st.GetUpdates()))
	}
	for _, u := range st.GetUpdates() {
		row := fmt.Sprintf(`#updates tr[data-update="%s@%d"] `, u.GetNamespace(), u.GetVersion())
		if got := b.text(row + `[data-field="hosts"]`); got != strconv.Itoa(int(u.GetSubscribedHosts())) {
			t.Errorf("propagation page: %s@%d on %s hosts; the API says %d", u.GetNamespace(), u.GetVersion(), got, u.GetSubscribedHosts())
		}
		if got := b.text(row + `[data-field="propagation"]`); got != secs(u.GetPropagation()) {
			t.Errorf("propagation page: %s@%d took %s; the API says %s", u.GetNamespace(), u.GetVersion(), got, secs(u.GetPropagation()))
		}
	}
}
