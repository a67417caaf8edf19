package gomemlimit_test

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"lehr.dev/lehr/internal/gomemlimit"
	"lehr.dev/lehr/testenv/memcgroup"
)

// childEnv set: the test binary is the child, run inside a cgroup; it
// applies the limit and prints what the runtime holds.
const childEnv = "LEHR_GOMEMLIMIT_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		got := gomemlimit.Apply(slog.New(slog.NewTextHandler(io.Discard, nil)))
		fmt.Printf("%d %d\n", got, debug.SetMemoryLimit(-1))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The runtime's soft limit is 90 % of the cgroup's memory.max; GOMEMLIMIT
// in the environment wins; AUTOMEMLIMIT=off leaves none. Runs the test
// binary in a memory cgroup of its own (needs root and the memory
// controller; skipped, saying why, without them).
func TestApplyFromCgroup(t *testing.T) {
	const max = 512 << 20
	cg, err := memcgroup.New(fmt.Sprintf("lehr-gomemlimit-test-%d", os.Getpid()), max)
	if err != nil {
		t.Skipf("no memory cgroup here: %v", err)
	}
	t.Cleanup(func() { cg.Close() })
	ratio := gomemlimit.Ratio
	for _, c := range []struct {
		name string
		env  []string
		want int64
	}{
		{"cgroup", nil, int64(float64(max) * ratio)},
		{"GOMEMLIMIT wins", []string{"GOMEMLIMIT=100MiB"}, 100 << 20},
		{"AUTOMEMLIMIT=off", []string{"AUTOMEMLIMIT=off"}, math.MaxInt64},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin, args := cg.Wrap(os.Args[0], []string{"-test.run=^$"})
			cmd := exec.Command(bin, args...)
			cmd.Env = append(append(os.Environ(), childEnv+"=1"), c.env...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("child: %v", err)
			}
			f := strings.Fields(string(out))
			if len(f) != 2 {
				t.Fatalf("child printed %q", out)
			}
			returned, _ := strconv.ParseInt(f[0], 10, 64)
			held, _ := strconv.ParseInt(f[1], 10, 64)
			if held != c.want || returned != c.want {
				t.Errorf("Apply returned %d, runtime holds %d; want %d", returned, held, c.want)
			}
		})
	}
}
