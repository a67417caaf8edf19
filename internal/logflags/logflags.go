// Package logflags is the --log-level and --log-format flags every Lehr
// daemon takes, and the slog.Logger they describe. Importable by any
// command package.
package logflags

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// Flags holds the values of the two flags.
type Flags struct {
	Level  string // debug, info, warn or error
	Format string // text or json
}

// Register defines --log-level (default info) and --log-format (default
// text) on fs and returns where their values land.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.Level, "log-level", "info", "lowest `level` logged: debug, info, warn or error")
	fs.StringVar(&f.Format, "log-format", "text", "log `format`: text or json (for log collectors)")
	return f
}

// Validate reports a flag value that Logger would refuse.
func (f *Flags) Validate() error {
	_, err := f.handlerOptions()
	if err == nil && f.Format != "text" && f.Format != "json" {
		err = fmt.Errorf("--log-format %q: want text or json", f.Format)
	}
	return err
}

func (f *Flags) handlerOptions() (*slog.HandlerOptions, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.Level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.Level)
	}
	return &slog.HandlerOptions{Level: lvl}, nil
}

// Logger returns a logger writing to w as the flags say. When w is the
// journal's stream of a systemd service (JOURNAL_STREAM names it), each
// line starts with its level as a syslog priority prefix ("<3>" for ERROR,
// "<4>" WARN, "<6>" INFO, "<7>" DEBUG), which journald takes off and files
// the line under: otherwise every line is at priority info, and
// journalctl -p err or -p warning, and systemctl status's highlighting,
// miss the daemon's errors.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	ho, _ := f.handlerOptions()
	newHandler := func(w io.Writer) slog.Handler {
		if f.Format == "json" {
			return slog.NewJSONHandler(w, ho)
		}
		return slog.NewTextHandler(w, ho)
	}
	if !isJournalStream(w) {
		return slog.New(newHandler(w)), nil
	}
	return slog.New(journalHandler{
		err:   newHandler(prefixWriter{w, "<3>"}),
		warn:  newHandler(prefixWriter{w, "<4>"}),
		info:  newHandler(prefixWriter{w, "<6>"}),
		debug: newHandler(prefixWriter{w, "<7>"}),
	}), nil
}

// isJournalStream reports whether w is the stream systemd connected to
// the journal for this service: JOURNAL_STREAM is its "DEVICE:INODE"
// (systemd.exec(5), "Environment variables set by the service manager").
func isJournalStream(w io.Writer) bool {
	js := os.Getenv("JOURNAL_STREAM")
	f, ok := w.(*os.File)
	if js == "" || !ok {
		return false
	}
	id, ok := fileID(f)
	return ok && id == js
}

// journalHandler logs each record through the handler of its level's
// priority prefix. The four share their attributes and groups.
type journalHandler struct{ err, warn, info, debug slog.Handler }

func (h journalHandler) pick(l slog.Level) slog.Handler {
	switch {
	case l >= slog.LevelError:
		return h.err
	case l >= slog.LevelWarn:
		return h.warn
	case l >= slog.LevelInfo:
		return h.info
	}
	return h.debug
}

func (h journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.pick(l).Enabled(ctx, l)
}

func (h journalHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.pick(r.Level).Handle(ctx, r)
}

func (h journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return journalHandler{h.err.WithAttrs(as), h.warn.WithAttrs(as), h.info.WithAttrs(as), h.debug.WithAttrs(as)}
}

func (h journalHandler) WithGroup(name string) slog.Handler {
	return journalHandler{h.err.WithGroup(name), h.warn.WithGroup(name), h.info.WithGroup(name), h.debug.WithGroup(name)}
}

// prefixWriter writes each line slog hands it (one Write a record) with
// the prefix before it, in one Write: lines from different handlers never
// interleave.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	buf := make([]byte, 0, len(p.prefix)+len(b))
	buf = append(append(buf, p.prefix...), b...)
	if _, err := p.w.Write(buf); err != nil {
		return 0, err
	}
	return len(b), nil
}
