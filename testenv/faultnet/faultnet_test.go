package faultnet

import (
	"fmt"
	"net"
	"testing"
	"time"

	"lehr.dev/lehr/testenv/wait"
)

// echo serves UDP on loopback and answers every datagram with itself.
func echo(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	return pc.LocalAddr().String()
}

func client(t *testing.T, r *Relay) *net.UDPConn {
	t.Helper()
	ra, _ := net.ResolveUDPAddr("udp", r.Addr())
	c, err := net.DialUDP("udp", nil, ra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// receive collects the datagrams that come back, until it has n of them or
// d passed.
func receive(c *net.UDPConn, n int, d time.Duration) []string {
	var got []string
	buf := make([]byte, 2048)
	deadline := time.Now().Add(d)
	for len(got) < n {
		c.SetReadDeadline(deadline)
		k, err := c.Read(buf)
		if err != nil {
			return got
		}
		got = append(got, string(buf[:k]))
	}
	return got
}

func TestPassesDropsCutsAndCounts(t *testing.T) {
	r, err := Listen(echo(t), Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := client(t, r)
	c.Write([]byte("one"))
	if got := receive(c, 1, wait.Timeout); len(got) != 1 || got[0] != "one" {
		t.Fatalf("echo through the relay = %v, want [one]", got)
	}

	r.Cut(Up, true)
	c.Write([]byte("lost"))
	wait.For(t, "the relay to drop the datagram sent during the cut", func() bool { return r.Stats().Up.Dropped == 1 })
	r.Cut(Up, false)
	c.Write([]byte("two"))
	if got := receive(c, 1, wait.Timeout); len(got) != 1 || got[0] != "two" {
		t.Fatalf("after a cut up = %v, want [two]", got)
	}

	r.SetFaults(Up, Faults{Drop: 0.5})
	for i := range 400 {
		c.Write([]byte(fmt.Sprint(i)))
	}
	wait.For(t, "400 datagrams counted up", func() bool { return r.Stats().Up.Packets == 403 })
	st := r.Stats().Up
	if st.Dropped < 120 || st.Dropped > 280 {
		t.Errorf("dropped %d of 400 at 50%%; want about half", st.Dropped)
	}
}

func TestDelayJitterReordersDuplicate(t *testing.T) {
	r, err := Listen(echo(t), Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := client(t, r)
	r.SetFaults(Down, Faults{Delay: 50 * time.Millisecond, Jitter: 100 * time.Millisecond, Duplicate: 0.3})
	start := time.Now()
	for i := range 50 {
		c.Write([]byte(fmt.Sprintf("%02d", i)))
	}
	wait.For(t, "the 50 answers to reach the relay", func() bool { return r.Stats().Down.Packets == 50 })
	got := receive(c, 50+int(r.Stats().Down.Duplicated), wait.Timeout)
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("nothing was held back")
	}
	if len(got) < 55 {
		t.Errorf("%d datagrams came back, want 50 and about 15 duplicates", len(got))
	}
	inOrder := true
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			inOrder = false
		}
	}
	if inOrder {
		t.Errorf("jitter of 100 ms reordered nothing: %v", got)
	}
}
