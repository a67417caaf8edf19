package wire

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestValidateSignals(t *testing.T) {
	ok := func() *lehrpb.NamespaceSignals {
		return &lehrpb.NamespaceSignals{Namespace: "demo/a", IntervalSeconds: 10, First: 1700000000, Versions: []uint64{3, 4},
			Series: []*lehrpb.SignalSeries{{Name: "requests", Values: []float64{1, 2}}}}
	}
	mod := func(f func(*lehrpb.NamespaceSignals)) *lehrpb.Signals {
		ns := ok()
		f(ns)
		return &lehrpb.Signals{Namespaces: []*lehrpb.NamespaceSignals{ns}}
	}
	var many []*lehrpb.SignalsWanted
	for range MaxSignalsWanted + 1 {
		many = append(many, &lehrpb.SignalsWanted{Namespace: "demo/a"})
	}
	for _, tc := range []struct {
		name string
		msg  proto.Message
		want string // "" means valid
	}{
		{"valid", mod(func(*lehrpb.NamespaceSignals) {}), ""},
		{"no interval", mod(func(n *lehrpb.NamespaceSignals) { n.IntervalSeconds = 0 }), "namespaces[0].interval_seconds"},
		{"unaligned", mod(func(n *lehrpb.NamespaceSignals) { n.First = 1700000003 }), "namespaces[0].first: 1700000003 is not a multiple"},
		{"short series", mod(func(n *lehrpb.NamespaceSignals) { n.Series[0].Values = n.Series[0].Values[:1] }), "namespaces[0].series[0] (requests): 1 values for 2 intervals"},
		{"unnamed series", mod(func(n *lehrpb.NamespaceSignals) { n.Series[0].Name = "" }), "namespaces[0].series[0].name"},
		{"bad namespace", mod(func(n *lehrpb.NamespaceSignals) { n.Namespace = "nope" }), "namespaces[0].namespace"},
		{"request of too many", &lehrpb.SignalsRequest{Namespaces: many}, "at most 64"},
		{"request of a bad namespace", &lehrpb.SignalsRequest{Namespaces: []*lehrpb.SignalsWanted{{Namespace: "x"}}}, "namespaces[0].namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.msg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A report's services are bounded and named by the grammar: an agent
// cannot make its distributor (and control) hold what it likes.
func TestValidateReportServices(t *testing.T) {
	rep := func(clients uint32, svcs ...*lehrpb.ServiceConsumers) *lehrpb.Report {
		return &lehrpb.Report{Namespaces: []*lehrpb.NamespaceReport{{Namespace: "demo/a", Clients: clients, Services: svcs}}}
	}
	svc := func(s string, n uint32) *lehrpb.ServiceConsumers {
		return &lehrpb.ServiceConsumers{Service: s, Consumers: n}
	}
	var many []*lehrpb.ServiceConsumers
	for i := range 17 {
		many = append(many, svc(strings.Repeat("s", i+1), 1))
	}
	for _, tc := range []struct {
		name string
		msg  *lehrpb.Report
		want string // "" means valid
	}{
		{"none", rep(3), ""},
		{"some, and unnamed consumers", rep(3, svc("api", 1), svc("web", 1)), ""},
		{"bad name", rep(3, svc("Web UI", 1)), "namespaces[0].services[0].service"},
		{"listed twice", rep(3, svc("api", 1), svc("api", 1)), `"api" listed twice`},
		{"more than the leases", rep(1, svc("api", 1), svc("web", 1)), "more than the 1 holding leases"},
		{"too many", rep(100, many...), "17 services, at most 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.msg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
