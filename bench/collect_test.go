package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       time.Duration
	}{
		{"plain", "4242 (etcd) S 1 4242 4242 0 -1 4194560 1234 0 0 0 150 25 0 0 20 0 12 0 100 0 0", 1750 * time.Millisecond},
		// The command name may hold spaces and parentheses: the fields
		// start after the last ')'.
		{"spaces and parens", "7 (lehr (bench) x) R 1 7 7 0 -1 0 0 0 0 0 3 4 9 9 20 0 1 0 5 0 0", 70 * time.Millisecond},
		// cutime and cstime (fields 16, 17: a process's waited-for
		// children) are not its own.
		{"children not counted", "9 (sh) S 1 9 9 0 -1 0 0 0 0 0 0 1 500 500 20 0 1 0 5 0 0", 10 * time.Millisecond},
	} {
		got, err := parseStatCPU([]byte(tc.line))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{"", "12 (x", "12 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 a b 0 0 20 0 1 0 5 0 0"} {
		if got, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q) = %v, want an error", bad, got)
		}
	}
}

func TestParseStatusMemory(t *testing.T) {
	status := "Name:\tetcd\nVmPeak:\t  900 kB\nVmHWM:\t   4096 kB\nVmRSS:\t   2048 kB\nRssAnon:\t    1024 kB\nRssFile:\t 1024 kB\n"
	rss, anon, hwm := parseStatusMemory([]byte(status))
	if rss != 2048<<10 || anon != 1024<<10 || hwm != 4096<<10 {
		t.Errorf("got rss %d, anon %d, hwm %d; want %d, %d, %d", rss, anon, hwm, 2048<<10, 1024<<10, 4096<<10)
	}
	if rss, anon, hwm := parseStatusMemory(nil); rss != 0 || anon != 0 || hwm != 0 {
		t.Errorf("empty status: got %d, %d, %d, want zeros", rss, anon, hwm)
	}
}

func TestPerDelivery(t *testing.T) {
	for _, tc := range []struct {
		before, after time.Duration
		deliveries    int
		want          float64 // µs
	}{
		{0, 150 * time.Millisecond, 1500, 100},
		{2 * time.Second, 2*time.Second + 10*time.Millisecond, 10000, 1},
		{time.Second, time.Second, 100, 0},
		{0, time.Second, 0, 0}, // no delivery: no figure, not a division by zero
	} {
		got := perDelivery(procSample{cpu: tc.before}, procSample{cpu: tc.after}, tc.deliveries)
		if got != tc.want {
			t.Errorf("perDelivery(%v → %v, %d) = %v µs, want %v", tc.before, tc.after, tc.deliveries, got, tc.want)
		}
	}
}

// TestProcGroupSample sums a group's processes: this one twice is twice
// this one, within what it spent between the readings.
func TestProcGroupSample(t *testing.T) {
	one, err := procGroup{os.Getpid()}.sample()
	if err != nil {
		t.Fatal(err)
	}
	two, err := procGroup{os.Getpid(), os.Getpid()}.sample()
	if err != nil {
		t.Fatal(err)
	}
	if one.rss <= 0 || two.rss < 2*one.rss*9/10 || two.rss > 2*one.rss*11/10 {
		t.Errorf("rss: one %d, two %d: want two ≈ 2 × one", one.rss, two.rss)
	}
	if two.cpu < 2*one.cpu {
		t.Errorf("cpu: one %v, two %v: want two >= 2 × one", one.cpu, two.cpu)
	}
	if _, err := (procGroup{os.Getpid(), -1}).sample(); err == nil {
		t.Error("a group with no such process: no error")
	}
}

func TestParseSmapsFileRSS(t *testing.T) {
	smaps := `00400000-00c00000 r-xp 00000000 08:01 123 /usr/bin/lehr-agent
Size:               8192 kB
Rss:                6000 kB
00c00000-01000000 r--p 00800000 08:01 123 /usr/bin/lehr-agent
Rss:                1000 kB
7f0000000000-7f0000400000 rw-s 00000000 08:01 456 /var/lib/lehr-agent/cache/00001.vlog
Rss:                 300 kB
7f0000400000-7f0000800000 rw-p 00000000 00:00 0 
Rss:                9000 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Rss:                  16 kB
`
	exe, other := parseSmapsFileRSS([]byte(smaps), "/usr/bin/lehr-agent")
	if exe != 7000<<10 || other != 300<<10 {
		t.Errorf("exe %d, other %d; want %d, %d (anonymous and [stack] mappings not counted)", exe, other, 7000<<10, 300<<10)
	}
}
