package consumer

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/proto/lehrpb"
)

// Memory bounds of a view (issue 27): the heap a subscription holds, per
// byte of the namespace's keys and values, once the garbage is collected;
// and what one read of the file allocates. Values are large enough for the
// per-key overhead (a Property, the key's string) to be a few percent.
const (
	maxHeapPerDataByte  = 1.2
	maxAllocPerDataByte = 1.2
)

// writeBig writes version of ns under dir: keys properties of size bytes
// each, every value distinct (seeded by version). It returns the bytes of
// keys and values.
func writeBig(t *testing.T, dir string, version uint64, keys, size int) int64 {
	t.Helper()
	props := make([]content.Property, keys)
	for i := range props {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(uint64(i*7+j) + version*13)
		}
		props[i] = content.Property{Key: fmt.Sprintf("k/%06d", i), ContentType: "application/json", Value: v}
	}
	snap, err := content.New(props)
	if err != nil {
		t.Fatal(err)
	}
	f := nsfile.FromVersion(content.Version{Namespace: ns, Seq: version, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Content: snap})
	if err := (nsfile.Writer{NoSync: true}).Write(dir, f); err != nil {
		t.Fatalf("write version %d: %v", version, err)
	}
	return snap.Size()
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// totalAlloc returns the bytes allocated on the heap so far.
func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// TestViewHoldsOneCopy subscribes to a large namespace and checks that,
// after GC, the subscription's heap is about one copy of the data — after
// the first version and after a change (the old view is not kept).
// Sizes are chosen so a buffer grown by doubling would show: 9.8 MiB
// fills 61% of a 16 MiB buffer, 37.5 MiB 59% of a 64 MiB one.
func TestViewHoldsOneCopy(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads 220 MiB of namespace files")
	}
	for _, tc := range []struct {
		name       string
		keys, size int
	}{
		{"10000x1KiB", 10000, 1 << 10}, // control's property limit
		{"600x64KiB", 600, 64 << 10},
		{"1000x64KiB", 1000, 64 << 10}, // near nsfile.MaxBodyBytes
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := t.TempDir()
			data := writeBig(t, files, 1, tc.keys, tc.size)
			base := liveHeap()

			c, s := newOffline(t, files)
			v := next(t, s, nil)
			if v.Version() != 1 || v.Len() != tc.keys {
				t.Fatalf("view = version %d with %d keys, want 1 with %d", v.Version(), v.Len(), tc.keys)
			}
			v = nil
			first := float64(liveHeap()-base) / float64(data)

			writeBig(t, files, 2, tc.keys, tc.size)
			v = next(t, s, s.View())
			if v.Version() != 2 {
				t.Fatalf("view = version %d, want 2", v.Version())
			}
			v = nil
			second := float64(liveHeap()-base) / float64(data)

			t.Logf("data %.1f MiB; heap per data byte: %.3f after version 1, %.3f after version 2",
				float64(data)/(1<<20), first, second)
			if first > maxHeapPerDataByte || second > maxHeapPerDataByte {
				t.Errorf("heap per data byte = %.3f (version 1), %.3f (version 2), want ≤ %.1f each",
					first, second, maxHeapPerDataByte)
			}
			c.Close()
		})
	}
}

// TestReadViewAllocatesOneCopy checks that reading and verifying a file
// allocates about one copy of its data: the transient cost of a change on
// top of the old view.
func TestReadViewAllocatesOneCopy(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads a 37.5 MiB namespace file")
	}
	files := t.TempDir()
	data := writeBig(t, files, 1, 600, 64<<10)
	path := filepath.Join(files, "demo", "app"+nsfile.Ext)
	liveHeap()
	before := totalAlloc()
	v, fi, err := readView(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := float64(totalAlloc()-before) / float64(data)
	runtime.KeepAlive(v)
	t.Logf("data %.1f MiB; one read allocates %.3f bytes per data byte", float64(data)/(1<<20), got)
	if got > maxAllocPerDataByte {
		t.Errorf("one read allocates %.3f bytes per data byte, want ≤ %.1f", got, maxAllocPerDataByte)
	}

	// The same file again (start and the watcher both load; events
	// repeat): not read.
	before = totalAlloc()
	again, fi2, err := readView(path, fi)
	if err != nil || again != nil || fi2 != fi {
		t.Fatalf("readView of the file last read = %v, %v, %v; want nil, its stat, nil", again, fi2, err)
	}
	if n := totalAlloc() - before; n > 64<<10 {
		t.Errorf("readView of the file last read allocated %d bytes, want none of the data", n)
	}

	// A new version renamed over it is read.
	writeBig(t, files, 2, 600, 64<<10)
	v, _, err = readView(path, fi)
	if err != nil || v == nil || v.Version() != 2 {
		t.Fatalf("readView after a new version = %v, %v; want version 2", v, err)
	}
}
