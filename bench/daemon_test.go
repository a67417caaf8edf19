package bench

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseProm(t *testing.T) {
	in := `# HELP lehr_control_store_bytes etcd's size
# TYPE lehr_control_store_bytes gauge
lehr_control_store_bytes 3.4e+08
lehr_control_etcd_round_trips_total{op="get"} 12
lehr_control_etcd_round_trips_total{op="txn"} 3
lehr_control_etcd_duration_seconds_sum{op="compact"} 25.5
odd{reason="a b } c"} 7 1700000000
not-a-sample
bad_value NaNx
`
	got, err := parseProm(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := promSamples{
		"lehr_control_store_bytes":                             3.4e8,
		`lehr_control_etcd_round_trips_total{op="get"}`:        12,
		`lehr_control_etcd_round_trips_total{op="txn"}`:        3,
		`lehr_control_etcd_duration_seconds_sum{op="compact"}`: 25.5,
		`odd{reason="a b } c"}`:                                7,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseProm (-want +got):\n%s", diff)
	}
	for name, want := range map[string]float64{
		"lehr_control_etcd_round_trips_total": 15,
		"lehr_control_store_bytes":            3.4e8,
		"lehr_control_etcd_duration_seconds":  0, // a prefix of another name is not the name
		"missing":                             0,
	} {
		if got := got.sum(name); got != want {
			t.Errorf("sum(%q) = %v, want %v", name, got, want)
		}
	}
}
