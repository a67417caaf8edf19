package metricsource

import (
	"context"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestCheckTemplate(t *testing.T) {
	tests := []struct {
		tmpl    string
		wantErr string // "" accepts
	}{
		{`sum by (host) (increase(http_requests_total{job="shop",$population}[$interval]))`, ""},
		{`sum by (host) (rate(errors_total{$population}[$interval])) / sum by (host) (rate(requests_total{ $population , code!~"5.."}[$interval]))`, ""},
		{`histogram_quantile(0.99, sum by (host, le) (rate(latency_bucket{$population}[1m])))`, ""},
		{`up{path=~".*[{(]$", $population}`, ""}, // brackets and $ in strings do not count
		{``, "empty"},
		{`sum by (host) (increase(http_requests_total{job="shop"}[$interval]))`, "no $population"},
		{`sum by (host) (increase(x{$hosts}[$interval]))`, "unknown placeholder $hosts"},
		{`sum by (host) (x{$population}[$interval]`, `"(" is not closed`},
		{`x{$population}]`, `"]" at byte 14 closes nothing open`},
		{`x{$population,job="a}`, "not closed"},
		{`sum($population)`, "not a matcher inside a selector's braces"},
		{`x{job="a" $population}`, "not a matcher inside a selector's braces"},
		{strings.Repeat("x", MaxTemplateBytes) + `{$population}`, "at most 4096"},
	}
	for _, tc := range tests {
		err := CheckTemplate(tc.tmpl)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("CheckTemplate(%.60q) = %v; want %q", tc.tmpl, err, tc.wantErr)
		}
	}
}

func TestExpand(t *testing.T) {
	tests := []struct {
		name string
		tmpl string
		sel  Selection
		step time.Duration
		want string
	}{
		{"defaults", `sum by (host) (increase(x{job="shop",$population}[$interval]))`,
			Selection{Zone: "zone-a", Hosts: []string{"h1", "h2"}}, 10 * time.Second,
			`sum by (host) (increase(x{job="shop",host=~"h1|h2",zone="zone-a"}[10s]))`},
		{"labels of the analysis, regexp metacharacters quoted", `rate(x{$population}[$interval])`,
			Selection{HostLabel: "instance_name", ZoneLabel: "az", Zone: "eu-1", Hosts: []string{"web-1.example", "a+b"}}, 2 * time.Second,
			`rate(x{instance_name=~"web-1\\.example|a\\+b",az="eu-1"}[2s])`},
		{"no zone label", `x{$population} / y{$population}`,
			Selection{ZoneLabel: NoZoneLabel, Zone: "zone-a", Hosts: []string{"h1"}}, time.Minute,
			`x{host=~"h1"} / y{host=~"h1"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckTemplate(tc.tmpl); err != nil {
				t.Fatal(err)
			}
			if got := Expand(tc.tmpl, tc.sel, tc.step); got != tc.want {
				t.Errorf("Expand:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestCheckLabel(t *testing.T) {
	for _, tc := range []struct {
		name string
		zone bool
		ok   bool
	}{{"", false, true}, {"host", false, true}, {"-", true, true}, {"-", false, false}, {"1host", false, false}, {"a-b", true, false}} {
		if err := CheckLabel(tc.name, tc.zone); (err == nil) != tc.ok {
			t.Errorf("CheckLabel(%q, %v) = %v; want ok %v", tc.name, tc.zone, err, tc.ok)
		}
	}
}

func TestDecode(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	nan := math.NaN()
	tests := []struct {
		name    string
		status  int
		body    string
		want    []Series
		wantErr string
	}{
		{name: "matrix", status: 200, body: `{"status":"success","data":{"resultType":"matrix","result":[
			{"metric":{"host":"h1"},"values":[[1800000000,"1"],[1800000010,"2.5"]]},
			{"metric":{"host":"h2"},"values":[[1800000020,"NaN"],[1800000010.0005,"+Inf"]]}]},"warnings":["w"]}`,
			want: []Series{{Labels: map[string]string{"host": "h1"}, Values: []float64{1, 2.5, nan}},
				{Labels: map[string]string{"host": "h2"}, Values: []float64{nan, math.Inf(1), nan}}}},
		{name: "no series", status: 200, body: `{"status":"success","data":{"resultType":"matrix","result":[]}}`, want: []Series{}},
		{name: "an error answer", status: 400, body: `{"status":"error","errorType":"bad_data","error":"parse error at char 5"}`, wantErr: "400 Bad Request: parse error at char 5 (bad_data)"},
		{name: "an error status", status: 502, body: `bad gateway`, wantErr: "502 Bad Gateway"},
		{name: "not json", status: 200, body: `<html>`, wantErr: "not a range query's answer"},
		{name: "a vector", status: 200, body: `{"status":"success","data":{"resultType":"vector","result":[]}}`, wantErr: `result type "vector", want "matrix"`},
		{name: "a bad point", status: 200, body: `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[["x","1"]]}]}}`, wantErr: "is not [unix seconds"},
		{name: "a bad value", status: 200, body: `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1800000000,"one"]]}]}}`, wantErr: `value "one"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != APIPath || r.Method != http.MethodPost || r.FormValue("query") != "q" || r.FormValue("step") != "10" ||
					r.FormValue("start") != "1800000000" || r.FormValue("end") != "1800000020" {
					http.Error(w, "unexpected request "+r.Method+" "+r.URL.String(), http.StatusTeapot)
					return
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			s, err := New(Options{URL: srv.URL + "/"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.QueryRange(context.Background(), "q", start, start.Add(20*time.Second), 10*time.Second)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("QueryRange: err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, cmpopts.EquateNaNs(), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("QueryRange (-want +got):\n%s", d)
			}
		})
	}
}

// A range longer than MaxPoints steps is read in pieces and joined.
func TestQueryRangePieces(t *testing.T) {
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"host":"h1"},"values":[[` + r.FormValue("end") + `,"7"]]}]}}`))
	}))
	defer srv.Close()
	s, err := New(Options{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_800_000_000, 0)
	got, err := s.QueryRange(context.Background(), "q", start, start.Add((MaxPoints+5)*time.Second), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || len(got) != 1 || len(got[0].Values) != MaxPoints+6 || got[0].Values[MaxPoints-1] != 7 || got[0].Values[MaxPoints+5] != 7 {
		t.Fatalf("%d calls, %d series; want 2 calls joined into one series with the pieces' last points", calls, len(got))
	}
}

// Credentials in the URL go as basic authentication and are never shown;
// an unreachable source says so without the URL.
func TestNameAndUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s, err := New(Options{URL: "http://lehr:secret@" + addr + "/prom", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "http://"+addr+"/prom" {
		t.Errorf("Name() = %q; want the URL without credentials", s.Name())
	}
	_, err = s.QueryRange(context.Background(), "q", time.Unix(0, 0), time.Unix(10, 0), time.Second)
	if err == nil || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "connection refused") || !Unreachable(err) {
		t.Errorf("QueryRange of a closed port: %v; want connection refused, no credentials", err)
	}
	for _, bad := range []string{"prometheus:9090", "ftp://x", "http://x/?q=1"} {
		if _, err := New(Options{URL: bad}); err == nil {
			t.Errorf("New(%q) accepted it", bad)
		}
	}
}
