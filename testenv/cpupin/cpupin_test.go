package cpupin

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"lehr.dev/lehr/testenv/wait"
)

func TestParseString(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Set
		str  string
	}{
		{"0", Set{0}, "0"},
		{"1", Set{1}, "1"},
		{"0-1", Set{0, 1}, "0-1"},
		{"0-2,5", Set{0, 1, 2, 5}, "0-2,5"},
		{"5,0-2", Set{0, 1, 2, 5}, "0-2,5"},
		{"1,1,0", Set{0, 1}, "0-1"},
		{" 3-4,7-8 \n", Set{3, 4, 7, 8}, "3-4,7-8"},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.in, got, tc.want)
		}
		if s := got.String(); s != tc.str {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, s, tc.str)
		}
	}
	for _, bad := range []string{"", "a", "-1", "2-1", "0-", "0,,1"} {
		if got, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, got)
		}
	}
}

// firstCPU is a CPU this process may run on.
func firstCPU(t *testing.T) Set {
	t.Helper()
	all, err := Allowed(0)
	if err != nil {
		t.Fatal(err)
	}
	return all[:1]
}

// TestWrap starts a real process pinned by Wrap and reads its affinity
// back from the kernel once it has exec'd the program.
func TestWrap(t *testing.T) {
	cpus := firstCPU(t)
	bin, args, err := Wrap(cpus, "sleep", []string{"30"})
	if err != nil {
		t.Skipf("no taskset here: %v", err)
	}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	pid := cmd.Process.Pid
	wait.For(t, "the pinned process to exec sleep", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		return err == nil && strings.TrimSpace(string(b)) == "sleep"
	})
	got, err := Allowed(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, cpus) {
		t.Errorf("sleep runs on %v, want %v", got, cpus)
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if want := "Cpus_allowed_list:\t" + cpus.String(); !strings.Contains(string(status), want) {
		t.Errorf("/proc/%d/status lacks %q", pid, want)
	}
	if _, _, err := Wrap(nil, "sleep", nil); err == nil {
		t.Error("Wrap with no CPU: no error")
	}
}

// TestProcess pins this test process, checks every thread's affinity,
// and restores it.
func TestProcess(t *testing.T) {
	before, err := Allowed(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cpus := firstCPU(t)
	restore, err := Process(os.Getpid(), cpus)
	if err != nil {
		t.Fatal(err)
	}
	check := func(want Set) {
		t.Helper()
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			tid, _ := strconv.Atoi(e.Name())
			got, err := Allowed(tid)
			if err != nil {
				continue // the thread has exited
			}
			if !slices.Equal(got, want) {
				t.Errorf("thread %d runs on %v, want %v", tid, got, want)
			}
		}
	}
	check(cpus)
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	check(before)
}
