package control_test

import (
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// Propagation across control replicas: the strategist's leader measures,
// so an update is counted once, on its /metrics only; every replica
// answers GetPropagationStatus alike (from etcd); and when the leader
// goes, the next one measures the updates published after it leads,
// adding to the same record. Zone reports are sent through the API as a
// distributor of zone-a would send them (dev mode lets the test send
// them), three agents holding the namespace.
func TestPropagationAcrossReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, err := embedetcd.StartCluster(ctx, t.TempDir(), 1, controltest.Logger(t, slog.LevelError+4))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() { cluster.Close() })
	opts := control.Options{EtcdEndpoints: cluster.Endpoints(), Rollouts: true, RolloutInterval: 50 * time.Millisecond}
	a := controltest.StartControl(t, opts) // leads: it campaigns first
	cl := a.Client
	createDomain(t, cl, "ha", nil)
	if _, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	report := func(v uint64) {
		t.Helper()
		if _, err := cl.ReportZoneStatus(ctx, &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 3,
			Versions: []*lehrpb.VersionCount{{Namespace: "ha/ns", Version: v, Agents: 3}}}); err != nil {
			t.Fatal(err)
		}
	}
	b := controltest.StartControl(t, opts) // waits in the election
	counted := func(c *controltest.Server) int {
		var sb strings.Builder
		c.Control.Metrics().WritePrometheus(&sb)
		m := regexp.MustCompile(`(?m)^lehr_control_propagation_seconds_count\{size_class="small",subscribers="2-10"\} (\d+)$`).FindStringSubmatch(sb.String())
		if m == nil {
			t.Fatal("no lehr_control_propagation_seconds_count series for small updates to 2-10 hosts")
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	status := func(c *controltest.Server) []*lehrpb.PropagationUpdate {
		st, err := c.Client.GetPropagationStatus(ctx, &lehrpb.GetPropagationStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st.GetUpdates()
	}

	publish(t, cl, "ha/ns", prop("k", "", "1"))
	report(1)
	v2 := publish(t, cl, "ha/ns", prop("k", "", "2"))
	// A report still at version 1 completes nothing: wait for the leader
	// to track version 2 (in flight), then report it held.
	wait.For(t, "the leader to track version 2", func() bool {
		st, err := b.Client.GetPropagationStatus(ctx, &lehrpb.GetPropagationStatusRequest{})
		return err == nil && st.GetInFlight() == 1
	})
	report(1)
	report(v2.GetSeq())
	wait.For(t, "replica b to show version 2 measured", func() bool { return len(status(b)) == 1 })
	if u := status(b)[0]; u.GetVersion() != v2.GetSeq() || u.GetSubscribedHosts() != 3 || !u.GetPublishTime().AsTime().Equal(v2.GetCreateTime().AsTime()) {
		t.Errorf("replica b shows %v; want version %d on 3 hosts, published at its create_time", u, v2.GetSeq())
	}
	if na, nb := counted(a), counted(b); na != 1 || nb != 0 {
		t.Errorf("counted on the leader %d, on the other replica %d; want 1 and 0", na, nb)
	}

	a.Stop()
	cl = b.Client
	wait.For(t, "replica b to lead", func() bool {
		st, err := cl.GetControlStatus(ctx, &lehrpb.GetControlStatusRequest{})
		return err == nil && st.GetStrategistLeader() == st.GetReplica()
	})
	v3 := publish(t, cl, "ha/ns", prop("k", "", "3"))
	wait.For(t, "the new leader to track version 3", func() bool {
		st, err := cl.GetPropagationStatus(ctx, &lehrpb.GetPropagationStatusRequest{})
		return err == nil && st.GetInFlight() == 1
	})
	report(v3.GetSeq())
	wait.For(t, "version 3 measured by the new leader", func() bool { return len(status(b)) == 2 })
	us := status(b)
	if us[0].GetVersion() != v3.GetSeq() || us[1].GetVersion() != v2.GetSeq() {
		t.Errorf("updates %v; want version 3, then 2", us)
	}
	if n := counted(b); n != 1 {
		t.Errorf("the new leader counted %d updates, want 1 (version 3)", n)
	}
}
