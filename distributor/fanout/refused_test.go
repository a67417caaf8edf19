package fanout

import (
	"net/netip"
	"testing"
	"time"
)

// A refused address stays refused for refusalMemory at least and
// 2·refusalMemory at most; others never are, and the memory is bounded.
func TestRefusedAddrs(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	a := netip.MustParseAddrPort("127.0.0.1:4000")
	b := netip.MustParseAddrPort("127.0.0.1:4001")
	for _, tc := range []struct {
		name  string
		added time.Duration // after t0, when a is refused
		asked time.Duration // after t0
		want  bool
	}{
		{"at once", 0, 0, true},
		{"just under the memory", 0, refusalMemory - time.Nanosecond, true},
		{"added late in a generation, asked a memory later", refusalMemory / 2, refusalMemory*3/2 - time.Nanosecond, true},
		{"two memories later", 0, 2 * refusalMemory, false},
		{"long after", 0, time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r refusedAddrs
			r.has(b, t0) // starts the first generation at t0
			r.add(a, t0.Add(tc.added))
			if got := r.has(a, t0.Add(tc.asked)); got != tc.want {
				t.Errorf("has(refused address) = %v; want %v", got, tc.want)
			}
			if r.has(b, t0.Add(tc.asked)) {
				t.Error("has(address never refused) = true")
			}
		})
	}
	var r refusedAddrs
	for i := range maxRefusedAddrs + 10 {
		r.add(netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(i)), t0)
	}
	if n := len(r.cur) + len(r.prev); n != maxRefusedAddrs {
		t.Errorf("%d addresses remembered after a flood; want the bound, %d", n, maxRefusedAddrs)
	}
	if r.has(netip.AddrPort{}, t0) {
		t.Error("the zero address (not UDP) counts as refused")
	}
}
