package devcluster_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// TestPropagationMeasured runs control, a distributor per zone and four
// agents whose consumers subscribe to one namespace, publishes, and sees
// control's propagation measurement of the update: the histogram's count
// of small updates to 2-10 hosts rises by one on control's /metrics, and
// the console's Propagation page (as JSON) and GetPropagationStatus list
// the update with its four hosts and a time between its publish and now.
func TestPropagationMeasured(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "app/prop"
	c, err := devcluster.Start(ctx, devcluster.Options{
		NoSync: true, Dir: t.TempDir(), Zones: []string{"zone-a", "zone-b"}, AgentsPerZone: 2, Domains: []string{"app"},
		Logger:               controltest.Logger(t, slog.LevelError),
		ControlMetricsListen: "127.0.0.1:0", ControlHTTPListen: "127.0.0.1:0",
		ReportInterval: 200 * time.Millisecond, Rollouts: true, RolloutInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	prod := c.Producer()
	if _, err := prod.SetRolloutPolicy(ctx, "app", &lehrpb.RolloutPolicy{GlobalBlast: true}, "every zone at once", 0); err != nil {
		t.Fatal(err)
	}
	for _, z := range c.Zones() {
		for i := range 2 {
			cl, err := c.Consumer(z, i)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close() })
			if _, err := cl.Subscribe(ctx, ns); err != nil {
				t.Fatal(err)
			}
		}
	}
	v1, err := prod.Publish(ctx, ns, []producer.Property{{Key: "limit", Value: []byte("1")}})
	if err != nil {
		t.Fatal(err)
	}
	api := prod.RPC()
	atVersion := func(v uint64) int {
		n := 0
		for _, z := range c.Zones() {
			st, err := api.GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: z})
			if err != nil {
				return 0
			}
			for _, vc := range st.GetVersions() {
				if vc.GetNamespace() == ns && vc.GetVersion() == v {
					n += int(vc.GetAgents())
				}
			}
		}
		return n
	}
	wait.For(t, "four hosts reported at version 1", func() bool { return atVersion(v1.GetSeq()) == 4 })

	series := regexp.MustCompile(`(?m)^lehr_control_propagation_seconds_count\{size_class="small",subscribers="2-10"\} (\d+)$`)
	count := func() int {
		m := series.FindSubmatch(scrapeMetrics(t, c.ControlMetricsAddr()))
		if m == nil {
			t.Fatal("control's /metrics has no lehr_control_propagation_seconds_count for small updates to 2-10 hosts")
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	// Version 1 is a first version: not measured.
	before := count()
	v2, err := prod.Publish(ctx, ns, []producer.Property{{Key: "limit", Value: []byte("2")}})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the histogram to count version 2", func() bool { return count() == before+1 })
	if atVersion(v2.GetSeq()) != 4 {
		t.Errorf("the update was counted with %d of 4 hosts reported at it", atVersion(v2.GetSeq()))
	}

	st, err := api.GetPropagationStatus(ctx, &lehrpb.GetPropagationStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetUpdates()) != 1 {
		t.Fatalf("GetPropagationStatus lists %d updates, want version 2 only: %v", len(st.GetUpdates()), st)
	}
	u := st.GetUpdates()[0]
	if u.GetNamespace() != ns || u.GetVersion() != v2.GetSeq() || u.GetSubscribedHosts() != 4 || u.GetSizeClass() != "small" || u.GetSubscribers() != "2-10" {
		t.Errorf("measured update %v; want %s@%d, 4 hosts, small, 2-10", u, ns, v2.GetSeq())
	}
	if !u.GetPublishTime().AsTime().Equal(v2.GetCreateTime().AsTime()) || u.GetCompleteTime().AsTime().Before(u.GetPublishTime().AsTime()) ||
		u.GetPropagation().AsDuration() != u.GetCompleteTime().AsTime().Sub(u.GetPublishTime().AsTime()) {
		t.Errorf("update's times: published %v (version's %v), complete %v, propagation %v", u.GetPublishTime().AsTime(),
			v2.GetCreateTime().AsTime(), u.GetCompleteTime().AsTime(), u.GetPropagation().AsDuration())
	}

	// The console's page says the same, as JSON.
	resp, err := http.Get("http://" + c.ControlHTTPAddr() + "/console/propagation?format=json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var doc struct {
		Page   string          `json:"page"`
		Status json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || resp.StatusCode != 200 || doc.Page != "propagation" {
		t.Fatalf("GET /console/propagation?format=json: %d %v %.300s", resp.StatusCode, err, body)
	}
	var page lehrpb.PropagationStatus
	if err := protojson.Unmarshal(doc.Status, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.GetUpdates()) != 1 || page.GetUpdates()[0].GetVersion() != v2.GetSeq() || page.GetUpdates()[0].GetSubscribedHosts() != 4 {
		t.Errorf("the console's page lists %v; want version 2 on 4 hosts", page.GetUpdates())
	}
	for _, g := range page.GetGroups() {
		want := int32(0)
		if g.GetSizeClass() == "small" || g.GetSubscribers() == "2-10" {
			want = 1
		}
		if g.GetCount() != want {
			t.Errorf("the console's group %s%s counts %d updates, want %d", g.GetSizeClass(), g.GetSubscribers(), g.GetCount(), want)
		}
	}
}
