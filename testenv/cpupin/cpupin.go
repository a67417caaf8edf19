// Package cpupin runs processes on chosen CPUs, as taskset(1) or systemd's
// CPUAffinity= pins a unit: for benches that give each side of a race a
// core of its own, so that one side's CPU time cannot be taken from the
// other's. A child is pinned before its first instruction (Wrap: taskset
// sets its own affinity, then execs the program, whose every thread
// inherits it); a running process, this one included, is pinned thread by
// thread (Process).
//
// Imported by bench.
package cpupin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Set is a set of CPU numbers, ascending and without duplicates.
type Set []int

// Parse reads a CPU list as taskset --cpu-list and /proc/<pid>/status's
// Cpus_allowed_list write it: comma-separated numbers and inclusive
// ranges, e.g. "0-2,5".
func Parse(s string) (Set, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("cpupin: empty CPU list")
	}
	var set Set
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpupin: CPU list %q: bad CPU %q", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpupin: CPU list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			set = append(set, c)
		}
	}
	slices.Sort(set)
	return slices.Compact(set), nil
}

// String is the set as a CPU list, ranges joined: "0-2,5".
func (s Set) String() string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

func (s Set) mask() *unix.CPUSet {
	var m unix.CPUSet
	for _, c := range s {
		m.Set(c)
	}
	return &m
}

// Allowed returns the CPUs the thread (or process: its main thread) tid
// may run on; 0 is the calling thread.
func Allowed(tid int) (Set, error) {
	var m unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &m); err != nil {
		return nil, fmt.Errorf("cpupin: affinity of %d: %w", tid, err)
	}
	var s Set
	for c := range len(m) * 64 {
		if m.IsSet(c) {
			s = append(s, c)
		}
	}
	return s, nil
}

// Wrap returns the command line that runs bin with args on cpus only:
// taskset --cpu-list sets its own affinity and execs bin, so the process
// (the same process ID) runs every thread on cpus from its start. It
// fails if taskset (util-linux) is not installed or cpus is empty.
func Wrap(cpus Set, bin string, args []string) (string, []string, error) {
	if len(cpus) == 0 {
		return "", nil, errors.New("cpupin: no CPU to pin to")
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return "", nil, fmt.Errorf("cpupin: taskset (util-linux) not found: %w", err)
	}
	return ts, append([]string{"--cpu-list", cpus.String(), bin}, args...), nil
}

// Process pins every thread of the running process pid to cpus, and
// returns a function that gives every thread it then has the affinity the
// process had before (its main thread's). Threads the process starts later
// inherit the affinity of the thread starting them, so the threads are
// listed again until a pass finds none it has not pinned.
func Process(pid int, cpus Set) (restore func() error, err error) {
	if len(cpus) == 0 {
		return nil, errors.New("cpupin: no CPU to pin to")
	}
	before, err := Allowed(pid)
	if err != nil {
		return nil, err
	}
	if err := setAll(pid, cpus); err != nil {
		setAll(pid, before)
		return nil, err
	}
	return func() error { return setAll(pid, before) }, nil
}

// setAll sets the affinity of every thread of pid to cpus.
func setAll(pid int, cpus Set) error {
	done := map[int]bool{}
	for {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return fmt.Errorf("cpupin: threads of %d: %w", pid, err)
		}
		fresh := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh++
			done[tid] = true
			if err := unix.SchedSetaffinity(tid, cpus.mask()); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("cpupin: pin thread %d of %d to %s: %w", tid, pid, cpus, err)
			}
		}
		if fresh == 0 {
			return nil
		}
	}
}
