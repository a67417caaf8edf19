package consumer

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

const ns = "demo/app"

func write(t *testing.T, dir string, version uint64, kv ...string) {
	t.Helper()
	var props []content.Property
	for i := 0; i < len(kv); i += 2 {
		props = append(props, content.Property{Key: kv[i], Value: []byte(kv[i+1])})
	}
	snap, err := content.New(props)
	if err != nil {
		t.Fatal(err)
	}
	f := nsfile.FromVersion(content.Version{Namespace: ns, Seq: version, Checksum: snap.Checksum(), Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
		Info: &lehrpb.VersionInfo{Author: "test"}, Content: snap})
	if err := nsfile.Write(dir, f); err != nil {
		t.Fatalf("write version %d: %v", version, err)
	}
}

// newOffline subscribes with no agent running: the client serves from the
// files directory and keeps trying to reach the agent.
func newOffline(t *testing.T, filesDir string) (*Client, *Subscription) {
	t.Helper()
	c, err := New(Options{Socket: filepath.Join(t.TempDir(), "absent.sock"), FilesDir: filesDir, RetryInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Subscribe(ctx, ns)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	return c, s
}

func next(t *testing.T, s *Subscription, after *View) *View {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := s.Next(ctx, after)
	if err != nil {
		var have uint64
		if after != nil {
			have = after.Version()
		}
		t.Fatalf("Next after version %d: %v", have, err)
	}
	return v
}

func TestFollowsFilesWithoutAgent(t *testing.T) {
	files := filepath.Join(t.TempDir(), "files") // does not exist yet
	_, s := newOffline(t, files)
	if v := s.View(); v.Version() != 0 || v.Len() != 0 {
		t.Fatalf("initial view = version %d with %d keys, want empty", v.Version(), v.Len())
	}

	var mu sync.Mutex
	var changes []Change
	s.OnChange(func(ch Change) error {
		mu.Lock()
		changes = append(changes, ch)
		mu.Unlock()
		return nil
	})

	// The directory and the file appear later.
	write(t, files, 1, "a", "1", "b", "2")
	v1 := next(t, s, nil)
	if got, _ := v1.Get("a"); string(got) != "1" || v1.Version() != 1 {
		t.Fatalf("v1: version %d a=%q", v1.Version(), got)
	}

	// A patch-like change: exactly the changed keys reach the callback.
	write(t, files, 2, "a", "1", "b", "20", "c", "3")
	v2 := next(t, s, v1)
	wait.For(t, "condition", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(changes) > 0 && changes[len(changes)-1].New.Version() == 2
	})
	mu.Lock()
	last := changes[len(changes)-1]
	mu.Unlock()
	// Versions that arrive faster than callbacks run are coalesced: the
	// callback sees version 2 against version 1, or against the empty view
	// when it never saw version 1.
	want := map[uint64][]string{1: {"b", "c"}, 0: {"a", "b", "c"}}[last.Old.Version()]
	if want == nil {
		t.Errorf("change old version = %d; want 1 or 0", last.Old.Version())
	} else if diff := cmp.Diff(want, last.Changed); diff != "" {
		t.Errorf("changed keys against version %d (-want +got):\n%s", last.Old.Version(), diff)
	}

	// An older version is ignored.
	write(t, files, 1, "a", "old")
	// A corrupt file renamed into place is ignored; the view stays at 2.
	path, _ := nsfile.Path(files, ns)
	bad := filepath.Join(filepath.Dir(path), ".garbage")
	if err := os.WriteFile(bad, []byte("LEHR1 not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bad, path); err != nil {
		t.Fatal(err)
	}
	// The directory is removed and recreated with a newer version.
	if err := os.RemoveAll(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	write(t, files, 3, "a", "3")
	v3 := next(t, s, v2)
	if v3.Version() != 3 {
		t.Fatalf("after recreate: version %d, want 3 (skipping the old and corrupt files)", v3.Version())
	}
	if got := s.View().Checksum(); got != v3.Checksum() || got == "" {
		t.Errorf("view checksum %q, want %q", got, v3.Checksum())
	}
}

func TestCallbackPanicsAndErrorsDoNotStopDelivery(t *testing.T) {
	files := t.TempDir()
	_, s := newOffline(t, files)
	var mu sync.Mutex
	seen := map[uint64]bool{}
	s.OnChange(func(ch Change) error { panic("boom") })
	s.OnChange(func(ch Change) error {
		mu.Lock()
		seen[ch.New.Version()] = true
		mu.Unlock()
		return nil
	})
	write(t, files, 1, "k", "v1")
	wait.For(t, "condition", func() bool { mu.Lock(); defer mu.Unlock(); return seen[1] })
	write(t, files, 2, "k", "v2")
	wait.For(t, "condition", func() bool { mu.Lock(); defer mu.Unlock(); return seen[2] })
}

func TestSubscribeRejectsBadNames(t *testing.T) {
	c, err := New(Options{Socket: filepath.Join(t.TempDir(), "x.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, bad := range []string{"", "noslash", "Demo/app", "demo/../etc"} {
		if _, err := c.Subscribe(context.Background(), bad); err == nil {
			t.Errorf("Subscribe(%q) succeeded", bad)
		}
	}
}

func TestSubscribeWithoutAgentOrFilesFails(t *testing.T) {
	c, err := New(Options{Socket: filepath.Join(t.TempDir(), "absent.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Subscribe(ctx, ns); err == nil {
		t.Fatal("Subscribe with no agent and no FilesDir succeeded")
	}
}

// A callback registered after Subscribe, when content is already on disk,
// first receives the current view; a later callback does too; both then see
// the next change from their own last view.
func TestLateCallbacksGetCurrentView(t *testing.T) {
	files := t.TempDir()
	write(t, files, 4, "a", "1", "b", "2")
	_, s := newOffline(t, files)
	if v := s.View(); v.Version() != 4 {
		t.Fatalf("view after Subscribe = version %d, want 4 (already on disk)", v.Version())
	}
	type seen struct{ old, new uint64 }
	var mu sync.Mutex
	got := map[string][]seen{}
	register := func(name string) {
		s.OnChange(func(ch Change) error {
			mu.Lock()
			got[name] = append(got[name], seen{ch.Old.Version(), ch.New.Version()})
			mu.Unlock()
			return nil
		})
	}
	has := func(name string, n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return len(got[name]) >= n }
	}
	register("first")
	wait.For(t, "first callback #1", has("first", 1))
	register("second")
	wait.For(t, "second callback #1", has("second", 1))
	write(t, files, 5, "a", "1", "b", "3")
	wait.For(t, "first callback #2", has("first", 2))
	wait.For(t, "second callback #2", has("second", 2))
	mu.Lock()
	defer mu.Unlock()
	want := []seen{{0, 4}, {4, 5}}
	for _, name := range []string{"first", "second"} {
		if diff := cmp.Diff(want, got[name], cmp.AllowUnexported(seen{})); diff != "" {
			t.Errorf("%s callback (old,new) versions (-want +got):\n%s", name, diff)
		}
	}
}

// A file holding the current version with another checksum is a repair
// (control's store was restored from a backup, and the agent rewrote the
// version it holds with control's content): the consumer takes it, calls
// back with the keys that changed, and Next returns it (issue 8, defect 2:
// the consumer ignored an equal version).
func TestSameVersionOtherChecksumIsARepair(t *testing.T) {
	files := t.TempDir()
	write(t, files, 4, "a", "1", "b", "2")
	_, s := newOffline(t, files)
	v := next(t, s, nil)
	if v.Version() != 4 {
		t.Fatalf("first view at version %d, want 4", v.Version())
	}
	changes := make(chan Change, 4)
	s.OnChange(func(ch Change) error { changes <- ch; return nil })
	<-changes // the current view

	write(t, files, 4, "a", "1", "b", "control's")
	repaired := next(t, s, v)
	if repaired.Version() != 4 || repaired.Checksum() == v.Checksum() {
		t.Fatalf("after the repair: version %d checksum %s; want version 4 with a new checksum", repaired.Version(), repaired.Checksum())
	}
	if got, _ := repaired.Get("b"); string(got) != "control's" {
		t.Errorf("repaired view b = %q, want control's", got)
	}
	select {
	case ch := <-changes:
		if len(ch.Changed) != 1 || ch.Changed[0] != "b" || ch.New.Checksum() != repaired.Checksum() {
			t.Errorf("repair callback: changed %v, new checksum %s; want [b] and the repaired view", ch.Changed, ch.New.Checksum())
		}
	case <-time.After(wait.Timeout):
		t.Fatal("no callback for the repair")
	}
	// An older version never replaces the view, repaired or not.
	write(t, files, 3, "a", "old")
	write(t, files, 4, "a", "1", "b", "control's") // unchanged: no callback
	select {
	case ch := <-changes:
		t.Errorf("unexpected callback %+v", ch)
	case <-time.After(200 * time.Millisecond):
	}
}
