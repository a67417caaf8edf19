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
