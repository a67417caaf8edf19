package distributor_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/distributor"
	"lehr.dev/lehr/testenv/wait"
)

// metricValue reads one metric of d (0 when absent).
func metricValue(t *testing.T, d *distributor.Distributor, name string) float64 {
	t.Helper()
	var b bytes.Buffer
	d.Metrics().WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// Issue 29, item 7: the control at the distributor's address comes back
// on an etcd of its own (its --etcd-endpoints left out), serving a new
// store that someone then publishes to. The distributor refuses every
// answer of that store — it keeps the goals it holds and serves them to
// agents, old and new, counting and logging each refusal — and follows its
// store again once a replica of it is back.
func TestRefusesAControlOfAnotherStore(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	setup(t, srv.Client)
	p := newPKI(t)
	d := startDistributor(t, p, srv.Addr)
	ns := "d/app"
	v1 := publish(t, srv.Client, ns, "k", "1")
	a := dial(t, p, d, "host-1", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, a, ns, v1)
	followed := d.ControlStoreID()
	if followed == "" {
		t.Fatal("the distributor follows no store after control's answers")
	}

	srv.Stop()
	lone := controltest.StartControl(t, control.Options{Listen: srv.Addr}) // a data directory of its own
	setup(t, lone.Client)
	publish(t, lone.Client, ns, "k", "from another store")
	other := publish(t, lone.Client, ns, "k", "from another store, newer") // v2: ahead of what agents hold
	const mismatches = "lehr_distributor_control_store_mismatches_total"
	wait.For(t, "the distributor to refuse the other store's answers", func() bool { return metricValue(t, d, mismatches) >= 2 })
	time.Sleep(500 * time.Millisecond) // a goal event would have arrived by now
	if st := d.Stats(); st.Goals != 1 || st.Serving != 1 || st.ControlConnected {
		t.Errorf("goals %d, serving %d, connected %v; want the one goal held and served, control not followed", st.Goals, st.Serving, st.ControlConnected)
	}
	if got := d.ControlStoreID(); got != followed {
		t.Errorf("follows store %q, want %q still", got, followed)
	}
	b := dial(t, p, d, "host-2", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, b, ns, v1)
	for _, ag := range []*agenttest.Agent{a, b} {
		if h, _ := ag.Held(ns); h.Ref.Checksum != v1.GetChecksum() || h.Ref.Checksum == other.GetChecksum() {
			t.Errorf("%s holds %s@%d %s; want v1 of the followed store (%s), not the other store's (%s)", ag.HostID(), ns, h.Ref.Seq, h.Ref.Checksum, v1.GetChecksum(), other.GetChecksum())
		}
	}

	// The store's own replica is back: followed again.
	lone.Stop()
	back := controltest.StartControl(t, control.Options{DataDir: srv.DataDir, Listen: srv.Addr})
	refused := metricValue(t, d, mismatches)
	v2 := publish(t, back.Client, ns, "k", "2")
	waitVersion(t, a, ns, v2)
	if got := metricValue(t, d, mismatches); got != refused {
		t.Errorf("%v refusals after the store's replica came back, want none", got-refused)
	}
}
