package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/testenv/devcluster"
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
		types: map[string]string{"greeting": "text/plain", "limits/rps": "application/json", "features": "text/plain",
			"blob": "application/octet-stream", "long": "text/plain"},
	}
	v2 = &fixedView{
		ns: "demo/app", version: 3, checksum: "sha256:3333", author: "bob", message: "more headroom\nand more",
		created: t0.Add(time.Minute), props: map[string]string{
			"limits/rps": "250", "features": `{"dark_mode":true}`, "blob": "\x00\x01\x02",
			"long": strings.Repeat("x", 100), "multi": "line one\nline two\n", "empty": "",
		},
		types: map[string]string{"limits/rps": "application/json", "features": "application/json",
			"blob": "application/octet-stream", "long": "text/plain", "empty": "text/plain"},
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

	// Every JSON line parses and says what changed, values as their
	// content types say (docs/cli.md).
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("json output has %d lines, want 3:\n%s", len(lines), js.String())
	}
	var ev watchEvent
	if err := json.Unmarshal([]byte(lines[1]), &ev); err != nil {
		t.Fatalf("line 2 does not parse: %v", err)
	}
	want := []keyChange{
		{Key: "empty", Kind: "added", New: []byte{}, NewType: "text/plain"},
		{Key: "features", Kind: "modified", Old: []byte(`{"dark_mode":true}`), New: []byte(`{"dark_mode":true}`), OldType: "text/plain", NewType: "application/json"},
		{Key: "greeting", Kind: "removed", Old: []byte("hello"), OldType: "text/plain"},
		{Key: "limits/rps", Kind: "modified", Old: []byte("100"), New: []byte("250"), OldType: "application/json", NewType: "application/json"},
	}
	if diff := cmp.Diff(want, ev.Changes); diff != "" {
		t.Errorf("changes of version 3 (-want +got):\n%s", diff)
	}
	if ev.Version != 3 || ev.Previous != 1 || ev.Initial {
		t.Errorf("event = version %d previous %d initial %v, want 3, 1, false", ev.Version, ev.Previous, ev.Initial)
	}
}

// watchRun is "lehr watch" running in the background.
type watchRun struct {
	stdout, stderr syncBuffer
	cancel         context.CancelFunc
	done           chan int
}

func startWatch(t *testing.T, environ map[string]string, args ...string) *watchRun {
	t.Helper()
	w := &watchRun{done: make(chan int, 1)}
	e := &env{stdin: strings.NewReader(""), stdout: &w.stdout, stderr: &w.stderr, getenv: func(k string) string { return environ[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() { w.done <- run(ctx, append([]string{"watch"}, args...), e) }()
	t.Cleanup(func() { w.stop(t) })
	return w
}

// waitOutput waits until stdout contains want, failing early if the
// command ends.
func (w *watchRun) waitOutput(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(w.stdout.String(), want) {
		select {
		case code := <-w.done:
			w.done <- code
			t.Fatalf("lehr watch exited %d before printing %q\nstdout:\n%s\nstderr:\n%s", code, want, w.stdout.String(), w.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("lehr watch did not print %q within a minute\nstdout:\n%s\nstderr:\n%s", want, w.stdout.String(), w.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop interrupts the command and checks that it exits 0.
func (w *watchRun) stop(t *testing.T) {
	t.Helper()
	w.cancel()
	select {
	case code := <-w.done:
		w.done <- code
		if code != exitOK {
			t.Errorf("lehr watch exit code after interrupt = %d, want 0\nstderr:\n%s", code, w.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("lehr watch did not stop within a minute of the interrupt")
	}
}

// TestWatchAgainstAgent runs "lehr watch" against a real agent fed by a
// real distributor and control (testenv/devcluster).
func TestWatchAgainstAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := devcluster.Start(ctx, devcluster.Options{
		NoSync: true, // a test cluster need not survive a machine crash
		Zones:  []string{"zone-w"}, Domains: []string{"demo"}, Logger: controltest.Logger(t, slog.LevelWarn),
	})
	if err != nil {
		t.Fatalf("devcluster.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("devcluster Close: %v", err)
		}
	})
	ag, err := cl.Agent("zone-w", 0)
	if err != nil {
		t.Fatal(err)
	}
	prod := cl.Producer()

	// Before the namespace exists: it says it waits, then prints each
	// version as it lands.
	w := startWatch(t, nil, "demo/app", "--socket", ag.Socket())
	w.waitOutput(t, "waiting for demo/app to arrive at the agent on "+ag.Socket())
	v1, err := prod.Publish(ctx, "demo/app", []producer.Property{
		{Key: "greeting", Value: []byte("hello")}, {Key: "limits/rps", Value: []byte("100")},
	}, producer.WithMessage("first cut"))
	if err != nil {
		t.Fatal(err)
	}
	w.waitOutput(t, "demo/app version 1 (was 0), 2 changed keys\n  checksum   "+v1.GetChecksum()+"\n  author     ")
	w.waitOutput(t, "  message    first cut\n")
	w.waitOutput(t, "  + greeting = hello\n  + limits/rps = 100\n\n")
	if _, err := prod.Patch(ctx, "demo/app", 1, producer.Patch{Set: []producer.Property{{Key: "limits/rps", Value: []byte("250")}}, Delete: []string{"greeting"}},
		producer.WithMessage("more headroom")); err != nil {
		t.Fatal(err)
	}
	w.waitOutput(t, "demo/app version 2 (was 1), 2 changed keys\n")
	w.waitOutput(t, "  message    more headroom\n")
	w.waitOutput(t, "  - greeting (was hello)\n  ~ limits/rps: 100 → 250\n\n")
	w.stop(t)

	// A second watch finds version 2 at once; the socket comes from
	// LEHR_AGENT_SOCKET, relative to the working directory; -o json prints
	// one object per version.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, ag.Socket())
	if err != nil {
		t.Fatal(err)
	}
	j := startWatch(t, map[string]string{"LEHR_AGENT_SOCKET": rel}, "demo/app", "-o", "json")
	j.waitOutput(t, "\n")
	var ev watchEvent
	if err := json.Unmarshal([]byte(strings.SplitN(j.stdout.String(), "\n", 2)[0]), &ev); err != nil {
		t.Fatalf("first json line does not parse: %v\n%s", err, j.stdout.String())
	}
	want := watchEvent{Namespace: "demo/app", Version: 2, Checksum: ev.Checksum, Author: ev.Author, Message: "more headroom",
		CreateTime: ev.CreateTime, Initial: true, Changes: []keyChange{{Key: "limits/rps", Kind: "added", New: []byte("250")}}}
	if diff := cmp.Diff(want, ev); diff != "" || ev.Checksum == "" || ev.CreateTime == "" {
		t.Errorf("json event mismatch (-want +got):\n%s", diff)
	}
	j.stop(t)

	// With the agent down, --files-dir serves what it last wrote; without
	// it, the command says what to do.
	if err := ag.Stop(); err != nil {
		t.Fatalf("stop agent: %v", err)
	}
	f := startWatch(t, nil, "demo/app", "--socket", ag.Socket(), "--files-dir", ag.FilesDir())
	f.waitOutput(t, "demo/app version 2 (current), 1 key\n")
	f.stop(t)
	code, stdout, stderr := runCLI(t, nil, "watch", "demo/app", "--socket", ag.Socket(), "--timeout", "5s")
	if code != exitError || !strings.Contains(stderr, "is the agent running with --socket "+ag.Socket()+"?") {
		t.Errorf("watch with the agent down: exit %d, stderr %q (stdout %q); want %d and a hint", code, stderr, stdout, exitError)
	}
}
