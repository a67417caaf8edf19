// Package memcgroup runs a process in a memory cgroup of its own, limited
// as systemd's MemoryMax= would limit a unit, for benches and tests that
// check a daemon holds within its unit's limit. Creating one needs root
// and a cgroup hierarchy with the memory controller (v1 or v2).
//
// Imported by bench and tests.
package memcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Cgroup is a memory cgroup a scenario runs a process in, as systemd's
// MemoryMax= would: the kernel reclaims what it can (page cache, mapped
// files) at the limit and kills the process only when it cannot.
// Version 2 (memory.max) and version 1 (memory.limit_in_bytes)
// hierarchies are both handled; creating one needs root.
type Cgroup struct {
	dir string
	v2  bool
}

// New creates a cgroup named name limited to limit bytes, or
// says why it cannot.
func New(name string, limit int64) (*Cgroup, error) {
	for _, c := range []struct {
		root, limitFile string
		v2              bool
	}{
		{"/sys/fs/cgroup", "memory.max", true},
		{"/sys/fs/cgroup/unified", "memory.max", true},
		{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", false},
	} {
		if c.v2 {
			ctl, err := os.ReadFile(filepath.Join(c.root, "cgroup.subtree_control"))
			if err != nil || !strings.Contains(string(ctl), "memory") {
				continue
			}
		} else if _, err := os.Stat(filepath.Join(c.root, c.limitFile)); err != nil {
			continue
		}
		dir := filepath.Join(c.root, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create memory cgroup: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, c.limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			os.Remove(dir)
			return nil, fmt.Errorf("limit memory cgroup: %w", err)
		}
		return &Cgroup{dir: dir, v2: c.v2}, nil
	}
	return nil, errors.New("no memory cgroup hierarchy with the memory controller (needs cgroup v1's memory or v2 with memory enabled)")
}

// Wrap returns the command line that starts bin with args inside the
// cgroup: a shell joins it, then execs bin, so nothing runs outside it.
func (m *Cgroup) Wrap(bin string, args []string) (string, []string) {
	script := `echo $$ > "$0" && exec "$@"`
	return "/bin/sh", append([]string{"-c", script, filepath.Join(m.dir, "cgroup.procs"), bin}, args...)
}

// OOMKills returns how many processes of the cgroup the kernel killed for
// memory.
func (m *Cgroup) OOMKills() int {
	file, key := "memory.oom_control", "oom_kill"
	if m.v2 {
		file, key = "memory.events", "oom_kill"
	}
	b, err := os.ReadFile(filepath.Join(m.dir, file))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// Close removes the cgroup (it must be empty).
func (m *Cgroup) Close() error { return os.Remove(m.dir) }
