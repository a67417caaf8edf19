package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memCgroup is a memory cgroup a scenario runs a process in, as systemd's
// MemoryMax= would: the kernel reclaims what it can (page cache, mapped
// files) at the limit and kills the process only when it cannot.
// Version 2 (memory.max) and version 1 (memory.limit_in_bytes)
// hierarchies are both handled; creating one needs root.
type memCgroup struct {
	dir string
	v2  bool
}

// newMemCgroup creates a cgroup named name limited to limit bytes, or
// says why it cannot.
func newMemCgroup(name string, limit int64) (*memCgroup, error) {
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
		return &memCgroup{dir: dir, v2: c.v2}, nil
	}
	return nil, errors.New("no memory cgroup hierarchy with the memory controller (needs cgroup v1's memory or v2 with memory enabled)")
}

// wrap returns the command line that starts bin with args inside the
// cgroup: a shell joins it, then execs bin, so nothing runs outside it.
func (m *memCgroup) wrap(bin string, args []string) (string, []string) {
	script := `echo $$ > "$0" && exec "$@"`
	return "/bin/sh", append([]string{"-c", script, filepath.Join(m.dir, "cgroup.procs"), bin}, args...)
}

// oomKills returns how many processes of the cgroup the kernel killed for
// memory.
func (m *memCgroup) oomKills() int {
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

// close removes the cgroup (it must be empty).
func (m *memCgroup) close() error { return os.Remove(m.dir) }
