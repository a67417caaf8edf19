package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// A cache Badger cannot open (here: a damaged MANIFEST, which fails its
// checksum) does not stop the agent: the cache is a cache. The agent moves
// it aside, starts with an empty one, serves the verified files of the
// previous run meanwhile, fetches everything again, and says so in its log
// and metrics (issue 8, defect 11: it exited 1 on every start until someone
// deleted the cache by hand).
func TestDamagedCacheIsQuarantined(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/cfg"
	props := map[string]string{"a": "alpha"}
	v1 := h.publish(ns, props)
	dir := dataDir(t)
	r := h.startAgent(dir, h.addrs())
	path := subscribe(t, r, ns).GetPath()
	waitFile(t, path, v1.GetSeq(), props)
	r.stop(t)

	manifest := filepath.Join(dir, "cache", "MANIFEST")
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for i := 8; i < len(b); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(manifest, b, 0o644); err != nil {
		t.Fatal(err)
	}

	r = h.startAgent(dir, h.addrs()) // fails the test if the agent does not start
	if got := counter(r, "lehr_agent_cache_quarantines_total"); got != 1 {
		t.Errorf("lehr_agent_cache_quarantines_total = %d, want 1", got)
	}
	if f, err := nsfile.Read(path); err != nil || f.Version != v1.GetSeq() {
		t.Errorf("the previous run's file: version %d, err %v; want it served (version %d)", f.Version, err, v1.GetSeq())
	}
	subscribe(t, r, ns)
	wait.For(t, "the namespace fetched again into a fresh cache", func() bool {
		got, err := r.api.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: ns})
		return err == nil && got.GetVersion().GetSeq() == v1.GetSeq()
	})
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var moved []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "cache.damaged-") {
			moved = append(moved, e.Name())
		}
	}
	if len(moved) != 1 {
		t.Errorf("data dir holds %v; want the damaged cache kept aside once, as cache.damaged-<time>", moved)
	}
}

// A namespace file damaged (or removed) while the agent runs is noticed and
// written again from the cache, and a consumer that subscribes meanwhile is
// answered with a file that verifies, instead of waiting for a version the
// agent holds but never rewrites (issue 8, defect 12).
func TestDamagedFileIsRewritten(t *testing.T) {
	h := newHarness(t, 1)
	ns := domain + "/cfg"
	props := map[string]string{"a": "alpha", "b": "beta"}
	v1 := h.publish(ns, props)
	r := h.startAgent(dataDir(t), h.addrs())
	path := subscribe(t, r, ns).GetPath()
	waitFile(t, path, v1.GetSeq(), props)

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil { // torn by someone else
		t.Fatal(err)
	}
	// A new consumer subscribes: it is answered with the version held and
	// a file that verifies.
	resp := subscribe(t, r, ns)
	if resp.GetVersion() != v1.GetSeq() {
		t.Errorf("Subscribe answered version %d, want %d", resp.GetVersion(), v1.GetSeq())
	}
	if f, err := nsfile.Read(path); err != nil || f.Version != v1.GetSeq() {
		t.Errorf("after Subscribe the file is version %d, err %v; want a verified version %d", f.Version, err, v1.GetSeq())
	}
	// Damage it again with nobody subscribing: the agent's own check finds
	// it.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFile(t, path, v1.GetSeq(), props)
	if got := counter(r, "lehr_agent_file_repairs_total"); got < 2 {
		t.Errorf("lehr_agent_file_repairs_total = %d, want 2", got)
	}
}
