package versions_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"lehr.dev/lehr/distributor/versions"
	"lehr.dev/lehr/internal/content"
)

// version makes version seq of ns holding one property of size bytes.
func version(t *testing.T, ns string, seq uint64, size int) *content.Version {
	t.Helper()
	snap, err := content.New([]content.Property{{Key: "k", Value: []byte(strings.Repeat("x", size-1))}})
	if err != nil {
		t.Fatal(err)
	}
	return &content.Version{Namespace: ns, Seq: seq, Checksum: snap.Checksum(), Content: snap}
}

func TestEvictionPrefersUnpinnedAndKeepsTheBound(t *testing.T) {
	c := versions.New(versions.Options{MaxBytes: 3000})
	put := func(v *content.Version) {
		t.Helper()
		if err := c.Put(v); err != nil {
			t.Fatalf("Put %s@%d: %v", v.Namespace, v.Seq, err)
		}
	}
	c.Pin("d/a", 1)
	put(version(t, "d/a", 1, 1000)) // pinned goal
	put(version(t, "d/b", 1, 1000))
	put(version(t, "d/b", 2, 1000))
	if got := c.Stats(); got.Versions != 3 || got.Bytes != 3000 {
		t.Fatalf("stats = %+v, want 3 versions, 3000 bytes", got)
	}
	// Touch d/b@1 so d/b@2 is the least recently used unpinned version.
	if _, ok := c.Lookup("d/b", 1); !ok {
		t.Fatal("d/b@1 missing")
	}
	put(version(t, "d/c", 1, 1000))
	for _, tc := range []struct {
		ns   string
		seq  uint64
		want bool
	}{
		{"d/a", 1, true},  // pinned although least recently used
		{"d/b", 1, true},  // recently used
		{"d/b", 2, false}, // evicted
		{"d/c", 1, true},
	} {
		if _, ok := c.Lookup(tc.ns, tc.seq); ok != tc.want {
			t.Errorf("Lookup(%s@%d) = %v, want %v", tc.ns, tc.seq, ok, tc.want)
		}
	}
	// Pinned versions alone over the bound: the least recently used go
	// too, so the cache stays within it (Get fetches them when wanted).
	c.Pin("d/b", 1)
	c.Pin("d/c", 1)
	c.Pin("d/d", 1)
	put(version(t, "d/d", 1, 2000))
	for _, tc := range []struct {
		ns   string
		want bool
	}{
		{"d/a", false}, // least recently used
		{"d/b", false},
		{"d/c", true},
		{"d/d", true},
	} {
		if _, ok := c.Lookup(tc.ns, 1); ok != tc.want {
			t.Errorf("Lookup(%s@1) = %v, want %v", tc.ns, ok, tc.want)
		}
	}
	if got := c.Stats(); got.Bytes != 3000 || got.Evictions != 3 {
		t.Errorf("stats = %+v, want 3000 bytes (the bound) after 3 evictions", got)
	}
}

func TestPutVerifiesChecksum(t *testing.T) {
	c := versions.New(versions.Options{})
	v := version(t, "d/a", 1, 10)
	v.Checksum = content.Snapshot{}.Checksum()
	if err := c.Put(v); !errors.Is(err, versions.ErrChecksum) {
		t.Fatalf("Put with a wrong checksum: err %v, want ErrChecksum", err)
	}
	if _, ok := c.Lookup("d/a", 1); ok {
		t.Fatal("a version failing its checksum was cached")
	}
}

func TestGetWithoutClient(t *testing.T) {
	c := versions.New(versions.Options{})
	for seq := range uint64(3) {
		if seq == 0 {
			continue
		}
		if err := c.Put(version(t, "d/a", seq, 10)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if v, err := c.Get(ctx, "d/a", content.Ref{Seq: 2}); err != nil || v.Seq != 2 {
		t.Errorf("Get(d/a@2) = %v, %v; want the cached version", v, err)
	}
	if _, err := c.Get(ctx, "d/a", content.Ref{Seq: 9}); !errors.Is(err, versions.ErrNotCached) {
		t.Errorf("Get(d/a@9) err = %v, want ErrNotCached", err)
	}
	if _, err := c.Get(ctx, "d/a", content.Ref{}); err == nil || !strings.Contains(err.Error(), "at least 1") {
		t.Errorf("Get(d/a@0) err = %v, want a clear error", err)
	}
}
