package content

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustNew(t *testing.T, props ...Property) Snapshot {
	t.Helper()
	s, err := New(props)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func p(k, v string) Property { return Property{Key: k, Value: []byte(v)} }

func TestChecksumCanonical(t *testing.T) {
	a := mustNew(t, p("b", "2"), p("a", "1"))
	b := mustNew(t, p("a", "1"), p("b", "2"))
	if a.Checksum() != b.Checksum() {
		t.Errorf("checksum depends on input order: %s vs %s", a.Checksum(), b.Checksum())
	}
	// Field boundaries matter: ("ab","c") differs from ("a","bc").
	c := mustNew(t, p("ab", "c"))
	d := mustNew(t, p("a", "bc"))
	if c.Checksum() == d.Checksum() {
		t.Error("checksum ignores field boundaries")
	}
	// Content type is part of the content.
	e := mustNew(t, Property{Key: "a", Value: []byte("1"), ContentType: "application/json"})
	if e.Checksum() == mustNew(t, p("a", "1")).Checksum() {
		t.Error("checksum ignores content type")
	}
	// Fixed vectors, computed by an independent implementation of the
	// algorithm in docs/wire.md, so it cannot drift unnoticed.
	vectors := []struct {
		snap Snapshot
		want string
	}{
		{mustNew(t), "sha256:5c2bae73f6ccdfcfc4202506e3982caa3b6026911b39818abc871d2f96ebb15e"},
		{mustNew(t, Property{Key: "limits/rps", ContentType: "application/json", Value: []byte(`{"rps":100}`)}, p("banner", "hello")),
			"sha256:d0c84af8326c52a0a1cd1a8a54ff0e444926ab4cb8494edc4bf5ccd80e31572f"},
	}
	for _, v := range vectors {
		if got := v.snap.Checksum(); got != v.want {
			t.Errorf("Checksum(%v) = %s, want %s", v.snap.Keys(), got, v.want)
		}
	}
}

func TestNewRejectsDuplicates(t *testing.T) {
	_, err := New([]Property{p("a", "1"), p("a", "2")})
	var ke *KeyError
	if !errors.Is(err, ErrDuplicateKey) || !errors.As(err, &ke) || ke.Key != "a" {
		t.Fatalf("New with duplicate key: err = %v", err)
	}
}

func TestApplyAndDiff(t *testing.T) {
	base := mustNew(t, p("a", "1"), p("b", "2"), p("c", "3"))
	tests := []struct {
		name    string
		patch   Patch
		want    []Property
		wantErr error
	}{
		{"set new", Patch{Set: []Property{p("d", "4")}}, []Property{p("a", "1"), p("b", "2"), p("c", "3"), p("d", "4")}, nil},
		{"replace", Patch{Set: []Property{p("b", "x")}}, []Property{p("a", "1"), p("b", "x"), p("c", "3")}, nil},
		{"delete", Patch{Delete: []string{"a"}}, []Property{p("b", "2"), p("c", "3")}, nil},
		{"mixed", Patch{Set: []Property{p("0", "z")}, Delete: []string{"c"}}, []Property{p("0", "z"), p("a", "1"), p("b", "2")}, nil},
		{"delete missing", Patch{Delete: []string{"zz"}}, nil, ErrMissingKey},
		{"dup set", Patch{Set: []Property{p("a", "1"), p("a", "2")}}, nil, ErrDuplicateKey},
		{"set and delete", Patch{Set: []Property{p("a", "1")}, Delete: []string{"a"}}, nil, ErrDuplicateKey},
		{"dup delete", Patch{Delete: []string{"a", "a"}}, nil, ErrDuplicateKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := base.Apply(tt.patch)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Apply err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, got.Props()); diff != "" {
				t.Errorf("Apply (-want +got):\n%s", diff)
			}
			// Diff must produce a patch that reproduces the result.
			again, err := base.Apply(Diff(base, got))
			if err != nil || again.Checksum() != got.Checksum() {
				t.Errorf("Apply(Diff) = %v, %v; want checksum %s", again.Checksum(), err, got.Checksum())
			}
		})
	}
	if base.Len() != 3 {
		t.Errorf("Apply modified its receiver: %v", base.Props())
	}
}

func TestChanges(t *testing.T) {
	from := mustNew(t, p("a", "1"), p("b", "2"), p("c", "3"))
	to := mustNew(t, p("b", "2"), p("c", "x"), p("d", "4"))
	var got []string
	for _, c := range Changes(from, to) {
		kind := "modified"
		if c.Old == nil {
			kind = "added"
		} else if c.New == nil {
			kind = "removed"
		}
		got = append(got, c.Key+":"+kind)
	}
	want := []string{"a:removed", "c:modified", "d:added"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Changes (-want +got):\n%s", diff)
	}
}

func TestChangesToProto(t *testing.T) {
	from := mustNew(t, p("a", "1"), p("b", "2"))
	to := mustNew(t, p("b", "3"), p("c", "4"))
	got := ChangesToProto(Changes(from, to))
	type row struct {
		Key, Kind, Old, New string
	}
	var rows []row
	for _, pc := range got {
		rows = append(rows, row{pc.GetKey(), pc.GetKind().String(), string(pc.GetOld().GetValue()), string(pc.GetNew().GetValue())})
	}
	want := []row{
		{"a", "KIND_REMOVED", "1", ""},
		{"b", "KIND_MODIFIED", "2", "3"},
		{"c", "KIND_ADDED", "", "4"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("ChangesToProto (-want +got):\n%s", diff)
	}
	if got[0].GetNew() != nil || got[2].GetOld() != nil {
		t.Errorf("absent sides must be nil: %v", got)
	}
}
