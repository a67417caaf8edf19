package strategist

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/control/alerts"
	"lehr.dev/lehr/proto/lehrpb"
)

// TestAlertsReadOncePerInterval: the rollouts of a round held by the
// monitoring check share one read of the alerts source, rounds within
// the source's interval read it not at all, and a rollout that only goes
// on waiting is not rewritten; once the alert clears, every one enters
// its stage.
func TestAlertsReadOncePerInterval(t *testing.T) {
	policy := &lehrpb.RolloutPolicy{
		Stages: []*lehrpb.RolloutStage{
			{Name: "all", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, Bake: durationpb.New(time.Hour)},
		},
		Monitoring: &lehrpb.MonitoringCheck{Alerts: []*lehrpb.AlertSelector{{Alert: "Overloaded"}}},
	}
	r := newStrategistRig(t, policy, "y", "z")
	mustDomain(r)
	var firing atomic.Bool
	var reads atomic.Int32
	firing.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reads.Add(1)
		alerts := ""
		if firing.Load() {
			alerts = `{"labels":{"alertname":"Overloaded","service":"pay"},"state":"firing","activeAt":"2030-01-01T11:59:00Z"}`
		}
		fmt.Fprintf(w, `{"status":"success","data":{"alerts":[%s]}}`, alerts)
	}))
	defer srv.Close()
	src, err := alerts.New(alerts.Options{URL: srv.URL, Interval: 10 * time.Second, Now: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.s.opts.Alerts = src
	nss := []string{"pay/a", "pay/b", "pay/c", "pay/d"}
	for _, ns := range nss {
		r.commit(ns, "1", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
		r.commit(ns, "2", lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	}
	r.round() // starts the rollouts; each is held before its first stage
	if n := reads.Load(); n != 1 {
		t.Errorf("a round holding %d rollouts read the alerts source %d times; want once", len(nss), n)
	}
	held := map[string]*lehrpb.Rollout{}
	for _, ns := range nss {
		ro := r.rollout(ns, 2)
		if ro.GetAlertHold() == nil || ro.GetStageStartTime() != nil || !strings.Contains(ro.GetReason(), `alert Overloaded{service="pay"} firing since 2030-01-01 11:59:00 UTC`) {
			t.Fatalf("%s: %v, hold %v: %s; want held before its first stage, naming the alert", ns, ro.GetState(), ro.GetAlertHold(), ro.GetReason())
		}
		held[ns] = ro
	}
	r.clock.advance(time.Second)
	r.round() // within the interval: no read, nothing written
	if n := reads.Load(); n != 1 {
		t.Errorf("a round within the source's interval read it: %d reads, want 1", n)
	}
	r.clock.advance(10 * time.Second)
	r.round() // the interval passed: one read, the same alert, nothing written
	if n := reads.Load(); n != 2 {
		t.Errorf("a round after the source's interval: %d reads, want 2", n)
	}
	for _, ns := range nss {
		if ro := r.rollout(ns, 2); !ro.GetUpdateTime().AsTime().Equal(held[ns].GetUpdateTime().AsTime()) || ro.GetEventCount() != held[ns].GetEventCount() {
			t.Errorf("%s was rewritten while the same alert fired: update time %v → %v, %d → %d events", ns,
				held[ns].GetUpdateTime().AsTime(), ro.GetUpdateTime().AsTime(), held[ns].GetEventCount(), ro.GetEventCount())
		}
	}
	firing.Store(false)
	r.clock.advance(10 * time.Second)
	r.round()
	for _, ns := range nss {
		if ro := r.rollout(ns, 2); ro.GetStageStartTime() == nil || ro.GetAlertHold() != nil || r.goal("y", ns) != 2 {
			t.Errorf("%s after the alert cleared: %v, hold %v, goal of y %d: %s; want its stage entered", ns, ro.GetState(), ro.GetAlertHold(), r.goal("y", ns), ro.GetReason())
		}
	}
}
