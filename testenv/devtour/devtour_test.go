package devtour

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
)

// fixedView is a view with fixed content.
type fixedView struct {
	ns         string
	version    uint64
	rollbackOf uint64
	props      map[string]string
}

func (v fixedView) Namespace() string  { return v.ns }
func (v fixedView) Version() uint64    { return v.version }
func (v fixedView) RollbackOf() uint64 { return v.rollbackOf }
func (v fixedView) Get(key string) ([]byte, bool) {
	s, ok := v.props[key]
	return []byte(s), ok
}

// The callback lines of the demo services, as "lehr dev" prints them
// (TestDev in cmd/lehr checks them in a whole run).
func TestFormatCallback(t *testing.T) {
	empty := fixedView{ns: appNamespace}
	v1 := fixedView{ns: appNamespace, version: 1, props: map[string]string{
		"demo.error_ratio": "0.01", "greeting": "hello from lehr", "limits/rps": "100", "owners": `["team-app"]`,
	}}
	v2 := fixedView{ns: appNamespace, version: 2, props: map[string]string{
		"demo.error_ratio": "0.01", "greeting": "hello from lehr", "limits/rps": "250",
	}}
	many := fixedView{ns: appNamespace, version: 7, props: map[string]string{}}
	var manyKeys []string
	for i := range 10 {
		k := fmt.Sprintf("k%02d", i)
		many.props[k] = "v"
		manyKeys = append(manyKeys, k)
	}
	for _, tc := range []struct {
		name     string
		old, cur fixedView
		changed  []string
		want     string
	}{{
		name: "first version, every key added",
		old:  empty, cur: v1,
		changed: []string{"demo.error_ratio", "greeting", "limits/rps", "owners"},
		want: "    [zone-a service on zone-a-host-0] callback: demo/app version 1 (was 0), 4 changed keys\n" +
			"        + demo.error_ratio = 0.01\n" +
			"        + greeting = hello from lehr\n" +
			"        + limits/rps = 100\n" +
			"        + owners = [\"team-app\"]\n",
	}, {
		name: "one key changed, one removed",
		old:  v1, cur: v2,
		changed: []string{"limits/rps", "owners"},
		want: "    [zone-a service on zone-a-host-0] callback: demo/app version 2 (was 1), 2 changed keys\n" +
			"        ~ limits/rps: 100 → 250\n" +
			"        - owners\n",
	}, {
		name:    "a rollback",
		old:     fixedView{ns: appNamespace, version: 3, props: map[string]string{"demo.error_ratio": "0.2"}},
		cur:     fixedView{ns: appNamespace, version: 4, rollbackOf: 2, props: map[string]string{"demo.error_ratio": "0.01"}},
		changed: []string{"demo.error_ratio"},
		want: "    [zone-a service on zone-a-host-0] callback: demo/app version 4 (was 3), a rollback to version 2's content, 1 changed key\n" +
			"        ~ demo.error_ratio: 0.2 → 0.01\n",
	}, {
		name: "a configuration the service refuses",
		old:  v2, cur: fixedView{ns: appNamespace, version: 3, props: map[string]string{"demo.error_ratio": "0.9"}},
		changed: []string{"demo.error_ratio"},
		want: "    [zone-a service on zone-a-host-0] callback: demo/app version 3 (was 2), 1 changed key\n" +
			"        ! refusing demo.error_ratio 0.9: it would fail most requests (at most 0.5)\n" +
			"        ~ demo.error_ratio: 0.01 → 0.9\n",
	}, {
		name: "more keys than a callback lists",
		old:  empty, cur: many,
		changed: manyKeys,
		want: "    [zone-a service on zone-a-host-0] callback: demo/app version 7 (was 0), 10 changed keys\n" +
			"        + k00 = v\n        + k01 = v\n        + k02 = v\n        + k03 = v\n" +
			"        + k04 = v\n        + k05 = v\n        + k06 = v\n        + k07 = v\n" +
			"        … and 2 more\n",
	}, {
		name: "what anyone pushed is escaped",
		old:  empty,
		cur: fixedView{ns: appNamespace, version: 5, props: map[string]string{
			"evil\x1b[2J": "x", "two": "lines\nhere", "bin": "\x00\xff",
		}},
		changed: []string{"bin", "evil\x1b[2J", "two"},
		want: "    [zone-a service on zone-a-host-0] callback: demo/app version 5 (was 0), 3 changed keys\n" +
			"        + bin = (binary, 2 bytes)\n" +
			"        + evil\\x1b[2J = x\n" +
			"        + two = lines… (10 bytes)\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := formatCallback("zone-a", "zone-a-host-0", tc.old, tc.cur, tc.changed)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("formatCallback (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJoinArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "demo/app", "--file", "/tmp/x.json"}, "push demo/app --file /tmp/x.json"},
		{[]string{"domain", "create", "demo", "--description", "created by lehr dev"}, `domain create demo --description "created by lehr dev"`},
		{[]string{"patch", "--set-json", `a={"b":1}`, "--message", ""}, `patch --set-json "a={\"b\":1}" --message ""`},
		{[]string{"get", "it's", "$HOME", "a*"}, `get "it's" "$HOME" "a*"`},
	} {
		if got := joinArgs(tc.args); got != tc.want {
			t.Errorf("joinArgs(%q) = %s, want %s", tc.args, got, tc.want)
		}
	}
}

func TestZoneNames(t *testing.T) {
	if diff := cmp.Diff([]string{"zone-a", "zone-b", "zone-c"}, zoneNames(3)); diff != "" {
		t.Errorf("zoneNames(3) (-want +got):\n%s", diff)
	}
	if got := zoneNames(MaxZones); got[MaxZones-1] != "zone-z" {
		t.Errorf("zoneNames(MaxZones) ends with %s, want zone-z", got[MaxZones-1])
	}
}

func TestCountPositive(t *testing.T) {
	s := &lehrpb.NamespaceSignals{Series: []*lehrpb.SignalSeries{
		{Name: "requests", Values: []float64{0, 5, 3, 0, 1}},
		{Name: "request_errors", Values: []float64{1, 1, 1, 1, 1}},
	}}
	if got := countPositive(s, "requests"); got != 3 {
		t.Errorf("countPositive(requests) = %d, want 3", got)
	}
	if got := countPositive(nil, "requests"); got != 0 {
		t.Errorf("countPositive(nil) = %d, want 0", got)
	}
}

// Control binds its ports itself, at its start, with no check before
// (issue 31: a check, then a bind later, lost a port to another process):
// a busy default port gives way to a free one, saying so; a port given
// explicitly is an error when busy.
func TestStartClusterBindsDirectly(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	start := func(grpc, metrics, httpAPI *listenAddr) (*devcluster.Cluster, []string, error) {
		var said []string
		say := func(f string, args ...any) { said = append(said, fmt.Sprintf(f, args...)) }
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cl, err := startCluster(ctx, devcluster.Options{Dir: t.TempDir(), Zones: []string{"zone-a"}, NoSync: true,
			Logger: slog.New(slog.DiscardHandler)}, grpc, metrics, httpAPI, say)
		if cl != nil {
			t.Cleanup(func() { cl.Close() })
		}
		return cl, said, err
	}

	cl, said, err := start(listenChoice("", busy.Addr().String(), "gRPC"), listenChoice("", busy.Addr().String(), "metrics"), listenChoice("", busy.Addr().String(), "HTTP/JSON"))
	if err != nil {
		t.Fatalf("with every default port busy: %v", err)
	}
	if cl.ControlAddr() == busy.Addr().String() || cl.ControlMetricsAddr() == busy.Addr().String() || cl.ControlMetricsAddr() == "" ||
		cl.ControlHTTPAddr() == busy.Addr().String() || cl.ControlHTTPAddr() == "" {
		t.Errorf("control on %s, metrics on %s, HTTP/JSON on %s; want other ports than the busy %s", cl.ControlAddr(), cl.ControlMetricsAddr(), cl.ControlHTTPAddr(), busy.Addr())
	}
	want := []string{"gRPC port " + busy.Addr().String() + " is busy; using a free port instead",
		"metrics port " + busy.Addr().String() + " is busy; using a free port instead",
		"HTTP/JSON port " + busy.Addr().String() + " is busy; using a free port instead"}
	if diff := cmp.Diff(want, said); diff != "" {
		t.Errorf("said (-want +got):\n%s", diff)
	}

	_, said, err = start(listenChoice(busy.Addr().String(), "127.0.0.1:0", "gRPC"), listenChoice("off", "", "metrics"), listenChoice("off", "", "HTTP/JSON"))
	if !errors.Is(err, syscall.EADDRINUSE) || len(said) != 0 {
		t.Errorf("with --listen on a busy port: %v, said %q; want the error, address in use", err, said)
	}
}

// Run refuses options it cannot run before it starts anything.
func TestRunRefusesBadOptions(t *testing.T) {
	lehr := func(context.Context, io.Writer, ...string) int { return 0 }
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no Out", Options{Lehr: lehr}, "Options.Out and Options.Lehr are required"},
		{"no Lehr", Options{Out: io.Discard}, "Options.Out and Options.Lehr are required"},
		{"too many zones", Options{Out: io.Discard, Lehr: lehr, Zones: 27}, "Options.Zones is 27: want 1 to 26"},
		{"negative zones", Options{Out: io.Discard, Lehr: lehr, Zones: -1}, "Options.Zones is -1"},
		{"too many hosts", Options{Out: io.Discard, Lehr: lehr, HostsPerZone: 21}, "Options.HostsPerZone is 21: want 1 to 20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// lehr dev prints the console's address, on control's HTTP/JSON listener.
func TestConsoleURL(t *testing.T) {
	if got, want := ConsoleURL("127.0.0.1:7402"), "http://127.0.0.1:7402/console/"; got != want {
		t.Errorf("ConsoleURL = %q, want %q", got, want)
	}
	if got := ConsoleURL(""); got != "" {
		t.Errorf("ConsoleURL without an HTTP listener = %q, want none", got)
	}
	if hint := curlHint("127.0.0.1:7402"); !strings.Contains(hint, "http://127.0.0.1:7402/console/") {
		t.Errorf("the ready hint does not name the console:\n%s", hint)
	}
}
