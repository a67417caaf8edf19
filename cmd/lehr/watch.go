package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/termtext"
)

func runWatch(ctx context.Context, e *env, args []string) int {
	defSocket := e.env("LEHR_AGENT_SOCKET")
	if defSocket == "" {
		defSocket = consumer.DefaultSocket
	}
	fs := newFlags("lehr watch", doc{
		usage:   "lehr watch NS [--socket PATH] [--files-dir DIR] [-o text|json]",
		summary: "follow a namespace on this host through the local agent",
		about: `A consumer on the command line: subscribes to namespace NS at this host's
agent (holding a lease, so the agent fetches and keeps it current, exactly as
a service using client/consumer would), prints the version the host has now
— or that it is waiting for the first one — and then every version as it
lands: number, checksum, author, message, and the keys that changed, marked
+ (added), - (removed) or ~ (changed), with short values. It is the simplest
way to see a change reach a host. When versions land faster than they are
printed, intermediate ones are skipped; versions never go backwards.

--files-dir (the agent's DATA_DIR/files) lets it start from the file the
agent last wrote even when the agent is down. -o json prints one JSON object
per version, each value as its content type says (JSON as JSON, text as a
string, other bytes as {"base64": …}), like -o json elsewhere (docs/cli.md).
Ctrl-C stops it.`,
		examples: []string{
			"lehr watch demo/app",
			"lehr watch payments/limits --socket /run/lehr/agent.sock",
			"lehr watch demo/app -o json | jq .changes",
		},
	})
	socket := fs.String("socket", defSocket, "the agent's unix socket `path` (env LEHR_AGENT_SOCKET)")
	filesDir := fs.String("files-dir", "", "the agent's files `directory`, to start from disk if the agent is down")
	output := fs.String("o", "text", "output `format`: text, or json (one object per version)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up reaching the agent at start after this `duration`")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 1, "namespace NS"); !ok {
		return code
	}
	ns := pos[0]
	if _, _, err := names.Namespace(ns); err != nil {
		return usageError(e, fs, "namespace %q: %v", ns, err)
	}
	if *output != "text" && *output != "json" {
		return usageError(e, fs, "-o %q: want text or json", *output)
	}
	if *timeout <= 0 {
		return usageError(e, fs, "--timeout %v: want a positive duration", *timeout)
	}
	// A relative path would be read as a gRPC authority: make it absolute.
	if abs, err := filepath.Abs(*socket); err == nil {
		*socket = abs
	}
	if e.checkOnly {
		return exitOK
	}
	c, err := consumer.New(consumer.Options{
		Socket:   *socket,
		FilesDir: *filesDir,
		ClientID: fmt.Sprintf("lehr-watch@%d", os.Getpid()),
		Logger:   slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintf(e.stderr, "lehr watch: %v\n", err)
		return exitError
	}
	defer c.Close()
	subCtx, cancel := context.WithTimeout(ctx, *timeout)
	sub, err := c.Subscribe(subCtx, ns)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return exitOK // interrupted while connecting
		}
		fmt.Fprintf(e.stderr, "lehr watch: %v\n", err)
		fmt.Fprintf(e.stderr, "  is the agent running with --socket %s? Pass --socket PATH (or set LEHR_AGENT_SOCKET), or --files-dir to read what it last wrote.\n", *socket)
		return exitError
	}
	defer sub.Close()

	w := newWatchPrinter(e.stdout, *output == "json")
	v := sub.View()
	if v.Version() == 0 {
		msg := fmt.Sprintf("waiting for %s to arrive at the agent on %s… (Ctrl-C to stop)\n", ns, *socket)
		if w.json {
			fmt.Fprint(e.stderr, msg)
		} else {
			fmt.Fprint(e.stdout, msg)
		}
	} else if err := w.print(nil, v); err != nil {
		fmt.Fprintf(e.stderr, "lehr watch: %v\n", err)
		return exitError
	}
	for {
		next, err := sub.Next(ctx, v)
		if err != nil {
			if ctx.Err() != nil {
				return exitOK // Ctrl-C, as intended
			}
			fmt.Fprintf(e.stderr, "lehr watch: %v\n", err)
			return exitError
		}
		if err := w.print(v, next); err != nil {
			fmt.Fprintf(e.stderr, "lehr watch: %v\n", err)
			return exitError
		}
		v = next
	}
}

// watchView is what "lehr watch" prints of a version: a *consumer.View,
// or a fixed one in tests.
type watchView interface {
	Namespace() string
	Version() uint64
	Checksum() string
	Author() string
	Message() string
	CreateTime() time.Time
	Keys() []string
	Len() int
	Get(key string) ([]byte, bool)
	ContentType(key string) string
}

// keyChange is one key that differs between two views.
type keyChange struct {
	Key  string
	Kind string // "added", "removed" or "modified"
	Old  []byte
	New  []byte
	// OldType and NewType are the content types, when set.
	OldType string
	NewType string
}

// MarshalJSON writes c as lehr's JSON (jsonout.go): key, kind, the old
// and new content types when set, and the old value (modified and
// removed) and new value (added and modified) as their content types say.
func (c keyChange) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"key":`)
	writeString(&b, c.Key)
	b.WriteString(`,"kind":`)
	writeString(&b, c.Kind)
	for _, f := range []struct {
		name, contentType string
		value             []byte
		has               bool
	}{
		{"old", c.OldType, c.Old, c.Kind != "added"},
		{"new", c.NewType, c.New, c.Kind != "removed"},
	} {
		if !f.has {
			continue
		}
		if f.contentType != "" {
			fmt.Fprintf(&b, `,"%s_content_type":`, f.name)
			writeString(&b, f.contentType)
		}
		fmt.Fprintf(&b, `,"%s":`, f.name)
		writePropertyValue(&b, f.contentType, f.value)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// viewChanges returns the keys that differ from old (nil: the empty view)
// to cur, sorted by key.
func viewChanges(old, cur watchView) []keyChange {
	var out []keyChange
	for _, k := range cur.Keys() {
		nv, _ := cur.Get(k)
		added := keyChange{Key: k, Kind: "added", New: nv, NewType: cur.ContentType(k)}
		if old == nil {
			out = append(out, added)
			continue
		}
		ov, had := old.Get(k)
		switch {
		case !had:
			out = append(out, added)
		case string(ov) != string(nv) || old.ContentType(k) != cur.ContentType(k):
			out = append(out, keyChange{Key: k, Kind: "modified", Old: ov, New: nv, OldType: old.ContentType(k), NewType: cur.ContentType(k)})
		}
	}
	if old != nil {
		for _, k := range old.Keys() {
			if _, ok := cur.Get(k); !ok {
				ov, _ := old.Get(k)
				out = append(out, keyChange{Key: k, Kind: "removed", Old: ov, OldType: old.ContentType(k)})
			}
		}
	}
	slices.SortFunc(out, func(a, b keyChange) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// watchEvent is what -o json prints for each version.
type watchEvent struct {
	Namespace  string      `json:"namespace"`
	Version    uint64      `json:"version"`
	Previous   uint64      `json:"previous"`
	Checksum   string      `json:"checksum"`
	Author     string      `json:"author,omitempty"`
	Message    string      `json:"message,omitempty"`
	CreateTime string      `json:"create_time,omitempty"`
	Initial    bool        `json:"initial,omitempty"`
	Changes    []keyChange `json:"changes"`
}

// watchPrinter prints versions for "lehr watch".
type watchPrinter struct {
	w    io.Writer
	json bool
	// maxKeys bounds the keys listed per version in text.
	maxKeys int
}

func newWatchPrinter(w io.Writer, json bool) *watchPrinter {
	return &watchPrinter{w: w, json: json, maxKeys: 20}
}

// print shows cur, as a change from old (nil for the version the host had
// when the watch started).
func (p *watchPrinter) print(old, cur watchView) error {
	changes := viewChanges(old, cur)
	if p.json {
		ev := watchEvent{
			Namespace: cur.Namespace(), Version: cur.Version(), Checksum: cur.Checksum(),
			Author: cur.Author(), Message: cur.Message(), Initial: old == nil, Changes: changes,
		}
		if old != nil {
			ev.Previous = old.Version()
		}
		if t := cur.CreateTime(); !t.IsZero() {
			ev.CreateTime = t.UTC().Format(time.RFC3339Nano)
		}
		if ev.Changes == nil {
			ev.Changes = []keyChange{}
		}
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode json: %w", err)
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	}
	var b strings.Builder
	if old == nil {
		fmt.Fprintf(&b, "%s version %d (current), %d %s\n", clean(cur.Namespace()), cur.Version(), cur.Len(), plural(cur.Len(), "key", "keys"))
	} else {
		fmt.Fprintf(&b, "%s version %d (was %d), %d changed %s\n", clean(cur.Namespace()), cur.Version(), old.Version(),
			len(changes), plural(len(changes), "key", "keys"))
	}
	fmt.Fprintf(&b, "  checksum   %s\n", clean(cur.Checksum()))
	fmt.Fprintf(&b, "  author     %s\n", orDash(cur.Author()))
	fmt.Fprintf(&b, "  message    %s\n", orDash(oneLine(cur.Message())))
	if t := cur.CreateTime(); !t.IsZero() {
		fmt.Fprintf(&b, "  published  %s\n", t.UTC().Format("2006-01-02 15:04:05Z"))
	}
	for i, c := range changes {
		if i == p.maxKeys {
			fmt.Fprintf(&b, "  … and %d more\n", len(changes)-i)
			break
		}
		switch c.Kind {
		case "added":
			fmt.Fprintf(&b, "  + %s = %s\n", clean(c.Key), termtext.Short(c.New))
		case "removed":
			fmt.Fprintf(&b, "  - %s (was %s)\n", clean(c.Key), termtext.Short(c.Old))
		default:
			if string(c.Old) == string(c.New) {
				fmt.Fprintf(&b, "  ~ %s: content type %s → %s\n", clean(c.Key), orDash(c.OldType), orDash(c.NewType))
				continue
			}
			fmt.Fprintf(&b, "  ~ %s: %s → %s\n", clean(c.Key), termtext.Short(c.Old), termtext.Short(c.New))
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(p.w, b.String())
	return err
}
