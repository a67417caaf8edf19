package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// collector gathers, per update sequence, when each of n subscribers was
// first notified and how often.
type collector struct {
	n int

	mu      sync.Mutex
	first   map[uint64][]int64 // seq → unix ns per subscriber, 0 = not yet
	count   map[uint64][]int32
	got     map[uint64]int
	changed chan struct{}
}

func newCollector(n int) *collector {
	return &collector{n: n, first: map[uint64][]int64{}, count: map[uint64][]int32{}, got: map[uint64]int{}, changed: make(chan struct{})}
}

// record notes that subscriber i was notified of seq at t (unix ns).
func (c *collector) record(i int, seq uint64, t int64) {
	if i < 0 || i >= c.n {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.first[seq]
	if !ok {
		f = make([]int64, c.n)
		c.first[seq] = f
		c.count[seq] = make([]int32, c.n)
	}
	c.count[seq][i]++
	if f[i] == 0 {
		f[i] = t
		c.got[seq]++
		if c.got[seq] == c.n {
			close(c.changed)
			c.changed = make(chan struct{})
		}
	}
}

// wait blocks until every subscriber has seen seq, timeout passes (false)
// or ctx ends.
func (c *collector) wait(ctx context.Context, seq uint64, timeout time.Duration) (bool, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		c.mu.Lock()
		done := c.got[seq] == c.n
		ch := c.changed
		c.mu.Unlock()
		if done {
			return true, nil
		}
		select {
		case <-ch:
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// result returns the latency of every subscriber that saw seq, measured
// from t0, and how many never saw it (missed) or saw it more than once
// (duplicated).
func (c *collector) result(seq uint64, t0 time.Time) (lat []time.Duration, missed, dups int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.first[seq]
	for i := range c.n {
		if f == nil || f[i] == 0 {
			missed++
			continue
		}
		lat = append(lat, time.Duration(f[i]-t0.UnixNano()))
		if c.count[seq][i] > 1 {
			dups++
		}
	}
	return lat, missed, dups
}

// roundStats accumulates fan-out rounds.
type roundStats struct {
	sums             []Summary       // per round, over subscribers
	all              []time.Duration // every latency of every round, for the CDF plot
	lasts            []time.Duration
	rates            []float64 // deliveries per second per round
	missed, dups     int
	rounds, complete int
}

// add records one round: the subscribers' latencies and what was missed.
func (r *roundStats) add(lat []time.Duration, missed, dups int) {
	r.rounds++
	r.missed += missed
	r.dups += dups
	if missed == 0 {
		r.complete++
	}
	if len(lat) == 0 {
		return
	}
	r.all = append(r.all, lat...)
	s := Summarize(lat)
	r.sums = append(r.sums, s)
	r.lasts = append(r.lasts, s.Max)
	if s.Max > 0 {
		r.rates = append(r.rates, float64(len(lat))/s.Max.Seconds())
	}
}

// row renders the accumulated rounds: medians across rounds of each
// round's p50/p90/p99 over subscribers, the last subscriber's latency,
// deliveries/s, and the totals of missed and duplicated deliveries.
func (r *roundStats) row(system, cs string) Row {
	row := Row{System: system, Case: cs}
	s := MedianSummary(r.sums)
	row.Add("p50", ms(s.P50), "ms")
	row.Add("p90", ms(s.P90), "ms")
	row.Add("p99", ms(s.P99), "ms")
	row.Add("last", ms(MedianDuration(r.lasts)), "ms")
	row.Add("worst last", ms(maxDuration(r.lasts)), "ms")
	row.Add("deliveries/s", Median(r.rates), "")
	row.Add("missed", float64(r.missed), "")
	row.Add("dup", float64(r.dups), "")
	row.Add("rounds", float64(r.rounds), "")
	return row
}

func maxDuration(v []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range v {
		m = max(m, d)
	}
	return m
}

// procSample is a process's CPU time and resident memory.
type procSample struct {
	cpu time.Duration // user + system
	rss int64         // bytes
	hwm int64         // peak RSS since the process started (VmHWM), bytes
	// anon is the anonymous part of rss (RssAnon): the heap and stacks,
	// without mapped files (Badger's value log), which the kernel may
	// reclaim under a cgroup's limit.
	anon int64
}

// readProc reads /proc/<pid>/stat and /proc/<pid>/status.
func readProc(pid int) (procSample, error) {
	var s procSample
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	if s.cpu, err = parseStatCPU(b); err != nil {
		return s, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	st2, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	s.rss, s.anon, s.hwm = parseStatusMemory(st2)
	return s, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Lehr builds for.
const clockTicks = 100

// parseStatCPU returns the CPU time, user + system (utime + stime, fields
// 14 and 15), of a /proc/<pid>/stat line: every thread's of the process,
// the exited ones' included; not its waited-for children's (cutime,
// cstime).
func parseStatCPU(b []byte) (time.Duration, error) {
	// Fields after the command name, which is parenthesised and may hold
	// spaces and parentheses: it ends at the last ')'.
	end := strings.LastIndexByte(string(b), ')')
	if end < 0 || end+2 > len(b) {
		return 0, fmt.Errorf("no command name in %q", b)
	}
	f := strings.Fields(string(b[end+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short stat line %q", b)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("utime, stime: %w", err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// parseStatusMemory returns VmRSS, RssAnon and VmHWM of a
// /proc/<pid>/status file, in bytes (0 where absent).
func parseStatusMemory(b []byte) (rss, anon, hwm int64) {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "RssAnon:":
			anon = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, anon, hwm
}

// procGroup is the processes of one side of a race (a system's servers,
// its subscribers), sampled together.
type procGroup []int

// sample returns the group's summed CPU time and RSS.
func (g procGroup) sample() (procSample, error) {
	var sum procSample
	for _, pid := range g {
		s, err := readProc(pid)
		if err != nil {
			return sum, err
		}
		sum.cpu += s.cpu
		sum.rss += s.rss
		sum.anon += s.anon
		sum.hwm += s.hwm
	}
	return sum, nil
}

// perDelivery is the CPU spent between two samples per delivery, in µs.
func perDelivery(before, after procSample, deliveries int) float64 {
	if deliveries <= 0 {
		return 0
	}
	return float64((after.cpu - before.cpu).Nanoseconds()) / 1e3 / float64(deliveries)
}

// heapInuse returns the Go heap in use after a full collection.
func heapInuse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// loadAvg1 is the machine's 1-minute load average (/proc/loadavg), -1
// when unreadable.
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return -1
	}
	return l
}

// udpReceiveDrops returns the machine's count of UDP datagrams dropped
// because a socket's receive buffer was full (RcvbufErrors in
// /proc/net/snmp): every process's, so a difference over a window with
// one system running is that system's.
func udpReceiveDrops() (int64, error) {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0, err
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f // the header line comes first
			continue
		}
		for i, name := range names {
			if name == "RcvbufErrors" && i < len(f) {
				return strconv.ParseInt(f[i], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no Udp RcvbufErrors in /proc/net/snmp")
}

// fileRSS returns the resident memory of pid's mappings of its own
// executable and of every other file (/proc/<pid>/smaps): the file-backed
// part of VmRSS, which the kernel can reclaim and, for the executable,
// shares between processes of one binary.
func fileRSS(pid int) (exe, other int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, 0, err
	}
	self, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return 0, 0, err
	}
	exe, other = parseSmapsFileRSS(b, self)
	return exe, other, nil
}

// parseSmapsFileRSS sums the Rss of the mappings of smaps b backed by the
// file exePath and by any other file (a path starting with '/').
func parseSmapsFileRSS(b []byte, exePath string) (exe, other int64) {
	path := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if strings.Contains(f[0], "-") && len(f) >= 5 { // a mapping's header line
			path = ""
			if len(f) >= 6 {
				path = strings.Join(f[5:], " ")
			}
			continue
		}
		if f[0] != "Rss:" || len(f) < 2 || !strings.HasPrefix(path, "/") {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		if path == exePath {
			exe += kb << 10
		} else {
			other += kb << 10
		}
	}
	return exe, other
}
