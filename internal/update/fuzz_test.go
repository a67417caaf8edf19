package update

import (
	"errors"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// FuzzCheckApply: arbitrary Update bytes that the wire decoder would accept,
// checked and applied against a fixed base, never
// panic, never modify the base, fail only with the documented errors, and
// succeed only with the promised checksum. An update that failed only on
// its checksum is retried with the checksum of an independent, map-based
// application and must then succeed with exactly that content.
func FuzzCheckApply(f *testing.F) {
	base := mustSnap(prop("a", "1"), prop("b", "2"), content.Property{Key: "c/d", ContentType: "application/json", Value: []byte(`{"x":1}`)})
	const baseVersion = 4
	baseSum := base.Checksum()
	held := content.Ref{Seq: baseVersion, Checksum: baseSum}

	add := func(u *lehrpb.Update) {
		b, err := proto.Marshal(u)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	next := mustSnap(prop("a", "1"), prop("b", "20"), prop("e", "5"), content.Property{Key: "c/d", ContentType: "application/json", Value: []byte(`{"x":1}`)})
	kind := lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG
	p, err := Build(&content.Version{Namespace: "demo/a", Seq: baseVersion, Kind: kind, Content: base}, &content.Version{Namespace: "demo/a", Seq: 5, Kind: kind, Content: next})
	if err != nil {
		f.Fatal(err)
	}
	add(p)
	s, err := Build(nil, &content.Version{Namespace: "demo/a", Seq: 9, Kind: kind, Content: next})
	if err != nil {
		f.Fatal(err)
	}
	add(s)
	add(&lehrpb.Update{Namespace: "demo/a", BaseVersion: baseVersion, BaseChecksum: baseSum, Version: 5, Checksum: sumEmpty, Delete: []string{"a", "b", "c/d"}})
	add(&lehrpb.Update{Namespace: "demo/a", BaseVersion: baseVersion, BaseChecksum: baseSum, Version: 5, Checksum: sumEmpty, Delete: []string{"zz"}})
	add(&lehrpb.Update{Namespace: "demo/a", BaseVersion: 3, BaseChecksum: baseSum, Version: 5, Checksum: sumEmpty})
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		u := new(lehrpb.Update)
		if err := proto.Unmarshal(data, u); err != nil {
			return
		}
		if wire.ValidateUpdate(u) != nil {
			return // the decoder refuses it; it never reaches Check
		}
		got, err := checkApply(base, held, u)
		checkResult(t, u, got, err)
		if base.Checksum() != baseSum {
			t.Fatal("Apply modified the base")
		}
		if !errors.Is(err, ErrChecksumMismatch) {
			return
		}
		want := referenceApply(base, u)
		u.Checksum = want.Checksum()
		got, err = checkApply(base, held, u)
		if err != nil {
			t.Fatalf("with the reference checksum: %v", err)
		}
		if !got.Equal(want) {
			t.Fatalf("Apply = %v, reference = %v", got.Keys(), want.Keys())
		}
	})
}

// checkApply is what an agent does with an Update: Check, then Apply.
func checkApply(base content.Snapshot, held content.Ref, u *lehrpb.Update) (content.Snapshot, error) {
	if err := Check(held, u); err != nil {
		return content.Snapshot{}, err
	}
	return Apply(base, u)
}

func checkResult(t *testing.T, u *lehrpb.Update, got content.Snapshot, err error) {
	t.Helper()
	switch {
	case err == nil:
		if got.Checksum() != u.GetChecksum() {
			t.Fatalf("success with checksum %s, update says %s", got.Checksum(), u.GetChecksum())
		}
		if !u.GetSnapshot() && (u.GetBaseVersion() != 4) {
			t.Fatalf("patch for base %d applied to base 4", u.GetBaseVersion())
		}
	case errors.Is(err, ErrStale), errors.Is(err, ErrGap), errors.Is(err, ErrBaseMismatch),
		errors.Is(err, ErrPatchConflict), errors.Is(err, ErrChecksumMismatch):
	default:
		t.Fatalf("undocumented error: %v", err)
	}
}

// referenceApply applies a valid update with a map, independently of
// content.Apply.
func referenceApply(base content.Snapshot, u *lehrpb.Update) content.Snapshot {
	m := map[string]content.Property{}
	if !u.GetSnapshot() {
		for _, p := range base.Props() {
			m[p.Key] = p
		}
	}
	for _, k := range u.GetDelete() {
		delete(m, k)
	}
	for _, p := range content.FromProto(u.GetSet()) {
		m[p.Key] = p
	}
	props := make([]content.Property, 0, len(m))
	for _, p := range m {
		props = append(props, p)
	}
	sort.Slice(props, func(i, j int) bool { return props[i].Key < props[j].Key })
	s, err := content.New(props)
	if err != nil {
		panic(err)
	}
	return s
}
