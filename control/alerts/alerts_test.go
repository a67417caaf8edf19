package alerts

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serve answers GET /api/v1/alerts with status and body, counting reads.
func serve(t *testing.T, status int, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != APIPath {
			http.NotFound(w, r)
			return
		}
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestRead(t *testing.T) {
	at := time.Date(2030, 1, 1, 21, 40, 3, 0, time.UTC)
	tests := []struct {
		name    string
		status  int
		body    string
		want    []Alert
		wantErr string
	}{
		{name: "prometheus", status: 200, body: `{"status":"success","data":{"alerts":[
			{"labels":{"alertname":"HighErrorRate","zone":"zone-b"},"annotations":{},"state":"firing","activeAt":"2030-01-01T21:40:03Z","value":"1e+00"},
			{"labels":{"alertname":"Slow"},"annotations":{},"state":"pending","activeAt":"2030-01-01T21:40:03Z","value":"1e+00"}]}}`,
			want: []Alert{{Labels: map[string]string{"alertname": "HighErrorRate", "zone": "zone-b"}, ActiveAt: at}}},
		// vmalert's shape: its name beside the labels, and fields of its own.
		{name: "vmalert", status: 200, body: `{"status":"success","data":{"alerts":[
			{"state":"firing","name":"HighErrorRate","value":"1","labels":{"zone":"zone-b"},"annotations":{},"activeAt":"2030-01-01T21:40:03Z","id":"1","rule_id":"2","group_id":"3","expression":"x > 0","source":"","restored":false,"stabilizing":false}]}}`,
			want: []Alert{{Labels: map[string]string{"alertname": "HighErrorRate", "zone": "zone-b"}, ActiveAt: at}}},
		{name: "nothing fires", status: 200, body: `{"status":"success","data":{"alerts":[]}}`, want: []Alert{}},
		{name: "an error answer", status: 503, body: `{"status":"error","errorType":"unavailable","error":"TSDB not ready"}`, wantErr: "503 Service Unavailable: TSDB not ready (unavailable)"},
		{name: "an error status", status: 404, body: `not here`, wantErr: "404 Not Found"},
		{name: "not json", status: 200, body: `<html>`, wantErr: "not an alerts list"},
		{name: "another document", status: 200, body: `{"status":"success","data":null}`, wantErr: `want "success" with data.alerts`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := serve(t, tc.status, tc.body)
			s, err := New(Options{URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			res := s.Read(context.Background())
			if tc.wantErr != "" {
				if res.Err == nil || !strings.Contains(res.Err.Error(), tc.wantErr) {
					t.Fatalf("Read: err %v, want one containing %q", res.Err, tc.wantErr)
				}
				return
			}
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if d := cmp.Diff(tc.want, res.Firing); d != "" {
				t.Errorf("Read (-want +got):\n%s", d)
			}
		})
	}
}

// One read per Interval, whoever asks; the next after it reads again.
func TestReadShared(t *testing.T) {
	srv, n := serve(t, 200, `{"status":"success","data":{"alerts":[]}}`)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(Options{URL: srv.URL + "/", Interval: 10 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		s.Read(context.Background())
	}
	if got := n.Load(); got != 1 {
		t.Errorf("5 reads within the interval: %d requests, want 1", got)
	}
	now = now.Add(10 * time.Second)
	s.Read(context.Background())
	if got := n.Load(); got != 2 {
		t.Errorf("a read after the interval: %d requests, want 2", got)
	}
}

// An unreachable source says so the same way at every read, without
// its credentials.
func TestReadUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s, err := New(Options{URL: "http://user:secret@" + addr, Interval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.Read(context.Background()), s.Read(context.Background())
	if a.Err == nil || a.Err.Error() != b.Err.Error() || strings.Contains(a.Err.Error(), "secret") || !strings.Contains(a.Err.Error(), "connection refused") {
		t.Errorf("reads of an unreachable source: %v, then %v; want the same error, saying connection refused, without the password", a.Err, b.Err)
	}
	if got, want := s.Name(), "http://"+addr; got != want {
		t.Errorf("Name: %q, want %q", got, want)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, u := range []string{"", "prometheus:9090", "ftp://prometheus", "http://", "http://p:9090/?x=1"} {
		if _, err := New(Options{URL: u}); err == nil {
			t.Errorf("New(%q): nil error, want one", u)
		}
	}
}

// A read its caller cancelled is not kept: the next caller reads anew.
func TestReadCancelledNotKept(t *testing.T) {
	srv, n := serve(t, 200, `{"status":"success","data":{"alerts":[]}}`)
	s, err := New(Options{URL: srv.URL, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := s.Read(ctx); res.Err == nil {
		t.Fatalf("a cancelled read: %+v, want an error", res)
	}
	if res := s.Read(context.Background()); res.Err != nil || n.Load() != 1 {
		t.Errorf("the read after a cancelled one: %v, %d requests; want it read, once", res.Err, n.Load())
	}
}
