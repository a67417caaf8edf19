package leases

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// step is one operation on the table. Leases are named by the test
// ("a", "b") so steps can refer to them.
type step struct {
	op    string // "sub", "keep", "unsub", "advance", "expire", "hold"
	lease string // test name of the lease for sub/keep/unsub
	ns    string // namespace for sub/hold
	ttl   time.Duration
	d     time.Duration // for advance

	wantTr     []Transition
	wantErr    error
	wantWanted []string // wanted namespaces after the step; nil means none
}

func TestTable(t *testing.T) {
	const ttl = 10 * time.Second
	const grace = time.Minute
	tests := []struct {
		name  string
		grace time.Duration
		steps []step
	}{
		{
			name: "first lease makes wanted, second does not transition",
			steps: []step{
				{op: "sub", lease: "a", ns: "d/x", wantTr: []Transition{{"d/x", true}}, wantWanted: []string{"d/x"}},
				{op: "sub", lease: "b", ns: "d/x", wantWanted: []string{"d/x"}},
				{op: "sub", lease: "c", ns: "d/y", wantTr: []Transition{{"d/y", true}}, wantWanted: []string{"d/x", "d/y"}},
			},
		},
		{
			name: "lease expires after TTL, namespace after grace",
			steps: []step{
				{op: "sub", lease: "a", ns: "d/x", wantTr: []Transition{{"d/x", true}}, wantWanted: []string{"d/x"}},
				{op: "advance", d: ttl - time.Nanosecond},
				{op: "expire", wantWanted: []string{"d/x"}},
				{op: "keep", lease: "a", wantWanted: []string{"d/x"}},
				{op: "advance", d: ttl},
				{op: "keep", lease: "a", wantErr: ErrNotFound, wantWanted: []string{"d/x"}},
				{op: "expire", wantWanted: []string{"d/x"}},
				{op: "advance", d: grace - time.Nanosecond},
				{op: "expire", wantWanted: []string{"d/x"}},
				{op: "advance", d: time.Nanosecond},
				{op: "expire", wantTr: []Transition{{"d/x", false}}},
			},
		},
		{
			name: "grace counts from the lease's expiry, not from the sweep",
			steps: []step{
				{op: "sub", lease: "a", ns: "d/x", wantTr: []Transition{{"d/x", true}}, wantWanted: []string{"d/x"}},
				{op: "advance", d: ttl + grace},
				{op: "expire", wantTr: []Transition{{"d/x", false}}},
			},
		},
		{
			name: "keepalive extends",
			steps: []step{
				{op: "sub", lease: "a", ns: "d/x", wantTr: []Transition{{"d/x", true}}, wantWanted: []string{"d/x"}},
				{op: "advance", d: 7 * time.Second},
				{op: "keep", lease: "a", wantWanted: []string{"d/x"}},
				{op: "advance", d: 7 * time.Second},
				{op: "keep", lease: "a", wantWanted: []string{"d/x"}},
				{op: "advance", d: 7 * time.Second},
				{op: "expire", wantWanted: []string{"d/x"}},
				{op: "keep", lease: "a", wantWanted: []string{"d/x"}},
			},
		},
		{
			name: "unsubscribe starts grace; a new lease in grace cancels it",
			steps: []step{
				{op: "sub", lease: "a", ns: "d/x", wantTr: []Transition{{"d/x", true}}, wantWanted: []string{"d/x"}},
				{op: "unsub", lease: "a", wantWanted: []string{"d/x"}},
				{op: "keep", lease: "a", wantErr: ErrNotFound, wantWanted: []string{"d/x"}},
				{op: "unsub", lease: "a", wantErr: ErrNotFound, wantWanted: []string{"d/x"}},
				{op: "advance", d: grace / 2},
				{op: "sub", lease: "b", ns: "d/x", wantWanted: []string{"d/x"}},
				{op: "advance", d: grace},
				{op: "keep", lease: "b", wantErr: ErrNotFound, wantWanted: []string{"d/x"}},
				{op: "expire", wantWanted: []string{"d/x"}},
				{op: "advance", d: grace},
				{op: "expire", wantTr: []Transition{{"d/x", false}}},
			},
		},
		{
			name: "one of two leases ending keeps the namespace",
			steps: []step{
				{op: "sub", lease: "a", ns: "d/x", wantTr: []Transition{{"d/x", true}}, wantWanted: []string{"d/x"}},
				{op: "sub", lease: "b", ns: "d/x", ttl: time.Hour, wantWanted: []string{"d/x"}},
				{op: "unsub", lease: "a", wantWanted: []string{"d/x"}},
				{op: "advance", d: 2 * grace},
				{op: "expire", wantWanted: []string{"d/x"}},
			},
		},
		{
			name:  "no grace: unsubscribe is unwanted at once",
			grace: -1,
			steps: []step{
				{op: "sub", lease: "a", ns: "d/x", wantTr: []Transition{{"d/x", true}}, wantWanted: []string{"d/x"}},
				{op: "unsub", lease: "a", wantTr: []Transition{{"d/x", false}}},
				{op: "hold", ns: "d/x"},
			},
		},
		{
			name: "hold is one grace period and yields to a lease",
			steps: []step{
				{op: "hold", ns: "d/x", wantTr: []Transition{{"d/x", true}}, wantWanted: []string{"d/x"}},
				{op: "hold", ns: "d/x", wantWanted: []string{"d/x"}},
				{op: "hold", ns: "d/y", wantTr: []Transition{{"d/y", true}}, wantWanted: []string{"d/x", "d/y"}},
				{op: "sub", lease: "a", ns: "d/y", ttl: time.Hour, wantWanted: []string{"d/x", "d/y"}},
				{op: "advance", d: grace},
				{op: "expire", wantTr: []Transition{{"d/x", false}}, wantWanted: []string{"d/y"}},
			},
		},
		{
			name: "several namespaces unwanted in one sweep, sorted",
			steps: []step{
				{op: "sub", lease: "a", ns: "d/z", wantTr: []Transition{{"d/z", true}}, wantWanted: []string{"d/z"}},
				{op: "sub", lease: "b", ns: "d/a", wantTr: []Transition{{"d/a", true}}, wantWanted: []string{"d/a", "d/z"}},
				{op: "advance", d: ttl + grace},
				{op: "expire", wantTr: []Transition{{"d/a", false}, {"d/z", false}}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{now: time.Unix(1000, 0)}
			g := tc.grace
			if g == 0 {
				g = grace
			}
			tab := New(Options{Now: clk.Now, DefaultTTL: ttl, Grace: g})
			ids := map[string]string{}
			for i, s := range tc.steps {
				var tr []Transition
				var err error
				switch s.op {
				case "sub":
					var l Lease
					l, tr, _ = tab.Subscribe(s.ns, "client-"+s.lease, "", s.ttl)
					ids[s.lease] = l.ID
					if want := tab.GrantTTL(s.ttl); l.TTL != want {
						t.Errorf("step %d: TTL = %v, want %v", i, l.TTL, want)
					}
				case "keep":
					_, err = tab.KeepAlive(ids[s.lease])
				case "unsub":
					tr, err = tab.Unsubscribe(ids[s.lease])
				case "advance":
					clk.Advance(s.d)
				case "expire":
					tr, _ = tab.Expire()
				case "hold":
					tr = tab.Hold(s.ns)
				default:
					t.Fatalf("step %d: unknown op %q", i, s.op)
				}
				if !errors.Is(err, s.wantErr) {
					t.Errorf("step %d (%s %s): err = %v, want %v", i, s.op, s.lease, err, s.wantErr)
				}
				if diff := cmp.Diff(s.wantTr, tr); diff != "" {
					t.Errorf("step %d (%s %s): transitions (-want +got):\n%s", i, s.op, s.lease, diff)
				}
				if s.op == "advance" {
					continue
				}
				var got []string
				for _, n := range tab.Namespaces() {
					got = append(got, n.Name)
					if !tab.Wanted(n.Name) {
						t.Errorf("step %d: Wanted(%q) = false for a listed namespace", i, n.Name)
					}
				}
				if diff := cmp.Diff(s.wantWanted, got); diff != "" {
					t.Errorf("step %d (%s %s): wanted namespaces (-want +got):\n%s", i, s.op, s.lease, diff)
				}
			}
		})
	}
}

func TestGrantTTL(t *testing.T) {
	tab := New(Options{DefaultTTL: 20 * time.Second, MaxTTL: time.Minute})
	tests := []struct {
		in, want time.Duration
	}{
		{0, 20 * time.Second},
		{-time.Second, 20 * time.Second},
		{time.Millisecond, MinTTL},
		{5 * time.Second, 5 * time.Second},
		{time.Hour, time.Minute},
	}
	for _, tc := range tests {
		if got := tab.GrantTTL(tc.in); got != tc.want {
			t.Errorf("GrantTTL(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	tab := New(Options{})
	if got := tab.GrantTTL(0); got != DefaultTTL {
		t.Errorf("default TTL = %v, want %v", got, DefaultTTL)
	}
	if got := tab.Grace(); got != DefaultGrace {
		t.Errorf("default grace = %v, want %v", got, DefaultGrace)
	}
}

func TestLookupAndCounts(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	tab := New(Options{Now: clk.Now, DefaultTTL: 10 * time.Second})
	l, _, _ := tab.Subscribe("d/x", "c1", "checkout", 0)
	tab.Subscribe("d/x", "c2", "", 0)
	tab.Subscribe("d/x", "c3", "checkout", 0)
	got, ok := tab.Lookup(l.ID)
	if !ok || got.Namespace != "d/x" || got.ClientID != "c1" || got.Service != "checkout" {
		t.Fatalf("Lookup(%q) = %+v, %v; want the d/x lease of c1 of checkout", l.ID, got, ok)
	}
	if n := tab.Namespaces(); len(n) != 1 || n[0].Leases != 3 || !maps.Equal(n[0].Services, map[string]int{"checkout": 2}) {
		t.Errorf("Namespaces() = %+v, want d/x with 3 leases, 2 of them checkout's", n)
	}
	clk.Advance(10 * time.Second)
	if _, ok := tab.Lookup(l.ID); ok {
		t.Errorf("Lookup of an expired lease succeeded")
	}
	if got := tab.Len(); got != 3 {
		t.Errorf("Len() before Expire = %d, want 3", got)
	}
	if _, lapsed := tab.Expire(); len(lapsed) != 3 {
		t.Errorf("Expire reported %d lapsed leases, want 3: %v", len(lapsed), lapsed)
	}
	if got := tab.Len(); got != 0 {
		t.Errorf("Len() after Expire = %d, want 0", got)
	}
}

// One client cannot hold more than MaxLeasesPerClient leases, nor all
// clients together more than MaxLeases: a misbehaving consumer that
// subscribes to thousands of namespaces is refused, with the limit, and
// the others are unaffected (issue 8, defect 14).
func TestLeaseCaps(t *testing.T) {
	tab := New(Options{MaxLeasesPerClient: 3, MaxLeases: 5})
	for i := range 3 {
		if _, _, err := tab.Subscribe(fmt.Sprintf("d/n%d", i), "greedy", "", 0); err != nil {
			t.Fatalf("lease %d of greedy: %v", i, err)
		}
	}
	_, trs, err := tab.Subscribe("d/n9", "greedy", "", 0)
	var te *TooManyError
	if !errors.As(err, &te) || te.Limit != 3 || te.Client != "greedy" || len(trs) != 0 {
		t.Errorf("fourth lease of one client = %v (transitions %v); want TooManyError with limit 3", err, trs)
	}
	for i := range 2 {
		if _, _, err := tab.Subscribe("d/other", fmt.Sprintf("c%d", i), "", 0); err != nil {
			t.Fatalf("other client %d: %v", i, err)
		}
	}
	if _, _, err := tab.Subscribe("d/other", "c9", "", 0); !errors.As(err, &te) || te.Limit != 5 || te.Client != "" {
		t.Errorf("lease beyond MaxLeases = %v; want TooManyError with limit 5", err)
	}
	if n := tab.Len(); n != 5 {
		t.Errorf("Len = %d after refusals, want 5", n)
	}
}
