package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fixedView is a watchView with fixed content.
type fixedView struct {
	ns, checksum, author, message string
	version                       uint64
	created                       time.Time
	props                         map[string]string
	types                         map[string]string
}

func (v *fixedView) Namespace() string     { return v.ns }
func (v *fixedView) Version() uint64       { return v.version }
func (v *fixedView) Checksum() string      { return v.checksum }
func (v *fixedView) Author() string        { return v.author }
func (v *fixedView) Message() string       { return v.message }
func (v *fixedView) CreateTime() time.Time { return v.created }
func (v *fixedView) Len() int              { return len(v.props) }
func (v *fixedView) Keys() []string {
	var ks []string
	for k := range v.props {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
func (v *fixedView) Get(k string) ([]byte, bool) {
	p, ok := v.props[k]
	return []byte(p), ok
}
func (v *fixedView) ContentType(k string) string { return v.types[k] }

func watchViews() (v1, v2, v3 *fixedView) {
	v1 = &fixedView{
		ns: "demo/app", version: 1, checksum: "sha256:1111", author: "alice", message: "first cut",
		created: t0, props: map[string]string{
			"greeting": "hello", "limits/rps": "100", "features": `{"dark_mode":true}`,
			"blob": "\x00\x01\x02", "long": strings.Repeat("x", 100), "multi": "line one\nline two\n",
		},
	}
	v2 = &fixedView{
		ns: "demo/app", version: 3, checksum: "sha256:3333", author: "bob", message: "more headroom\nand more",
		created: t0.Add(time.Minute), props: map[string]string{
			"limits/rps": "250", "features": `{"dark_mode":true}`, "blob": "\x00\x01\x02",
			"long": strings.Repeat("x", 100), "multi": "line one\nline two\n", "empty": "",
		},
		types: map[string]string{"features": "application/json"},
	}
	v3 = &fixedView{ns: "demo/app", version: 4, checksum: "sha256:4444", props: map[string]string{}}
	for i := range 25 {
		v3.props["k/"+string(rune('a'+i))] = "v"
	}
	return v1, v2, v3
}

func TestWatchPrinterGolden(t *testing.T) {
	v1, v2, v3 := watchViews()
	var text, js bytes.Buffer
	tp, jp := newWatchPrinter(&text, false), newWatchPrinter(&js, true)
	for _, p := range []*watchPrinter{tp, jp} {
		for _, step := range []struct{ old, cur watchView }{{nil, v1}, {v1, v2}, {v2, v3}} {
			if err := p.print(step.old, step.cur); err != nil {
				t.Fatal(err)
			}
		}
	}
	golden(t, "watch", text.Bytes())
	golden(t, "watch-json", js.Bytes())

	// Every JSON line parses and says what changed, values base64.
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("json output has %d lines, want 3:\n%s", len(lines), js.String())
	}
	var ev watchEvent
	if err := json.Unmarshal([]byte(lines[1]), &ev); err != nil {
		t.Fatalf("line 2 does not parse: %v", err)
	}
	want := []keyChange{
		{Key: "empty", Kind: "added", New: nil},
		{Key: "features", Kind: "modified", Old: []byte(`{"dark_mode":true}`), New: []byte(`{"dark_mode":true}`), NewType: "application/json"},
		{Key: "greeting", Kind: "removed", Old: []byte("hello")},
		{Key: "limits/rps", Kind: "modified", Old: []byte("100"), New: []byte("250")},
	}
	if diff := cmp.Diff(want, ev.Changes); diff != "" {
		t.Errorf("changes of version 3 (-want +got):\n%s", diff)
	}
	if ev.Version != 3 || ev.Previous != 1 || ev.Initial {
		t.Errorf("event = version %d previous %d initial %v, want 3, 1, false", ev.Version, ev.Previous, ev.Initial)
	}
}

func TestShortValue(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", `""`},
		{"250", "250"},
		{`{"a":1}`, `{"a":1}`},
		{"one\ntwo", "one… (7 bytes)"},
		{strings.Repeat("é", 61), strings.Repeat("é", 60) + "… (122 bytes)"},
		{"\x00\xff", "(binary, 2 bytes)"},
	}
	for _, tt := range tests {
		if got := shortValue([]byte(tt.in)); got != tt.want {
			t.Errorf("shortValue(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
