package chaos

import "testing"

// Ports handed out to daemons lie below the ephemeral range, where no
// outgoing connection takes them before the daemon binds, and never twice.
func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	lo, hi := portRange()
	seen := map[int]bool{}
	for i := range 200 {
		get := freeTCPPort
		if i%2 == 1 {
			get = freeUDPPort
		}
		p, err := get()
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p >= hi || seen[p] {
			t.Fatalf("port %d: want one in [%d, %d) not handed out before", p, lo, hi)
		}
		seen[p] = true
	}
}
