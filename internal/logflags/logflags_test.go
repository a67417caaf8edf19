package logflags

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
		json    bool
		lines   int // of the debug, info and warn lines logged
	}{
		{args: nil, lines: 2},
		{args: []string{"--log-format", "json"}, json: true, lines: 2},
		{args: []string{"--log-level", "debug"}, lines: 3},
		{args: []string{"--log-level", "WARN"}, lines: 1},
		{args: []string{"--log-level", "loud"}, wantErr: `--log-level "loud": want debug, info, warn or error`},
		{args: []string{"--log-format", "xml"}, wantErr: `--log-format "xml": want text or json`},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f := Register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		log, err := f.Logger(&buf)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: err = %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		log.Debug("d")
		log.Info("i")
		log.Warn("w")
		out := buf.String()
		if got := strings.Count(out, "\n"); got != tt.lines {
			t.Errorf("%v: %d lines logged, want %d:\n%s", tt.args, got, tt.lines, out)
		}
		if tt.json {
			line, _, _ := strings.Cut(out, "\n")
			if !json.Valid([]byte(line)) {
				t.Errorf("%v: not JSON: %q", tt.args, line)
			}
		}
	}
}

// TestJournalPriorities: on the journal's stream of a systemd service
// (JOURNAL_STREAM names the file written to), each line starts with its
// level's syslog priority, which journald files it under; on any other
// file, or with another JOURNAL_STREAM, lines are as they were.
func TestJournalPriorities(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		for _, journal := range []bool{true, false} {
			f, err := os.CreateTemp(t.TempDir(), "stderr")
			if err != nil {
				t.Fatal(err)
			}
			id, ok := fileID(f)
			if !ok {
				t.Skip("no device and inode here")
			}
			if !journal {
				id = "1:2"
			}
			t.Setenv("JOURNAL_STREAM", id)
			fl := &Flags{Level: "debug", Format: format}
			log, err := fl.Logger(f)
			if err != nil {
				t.Fatal(err)
			}
			log = log.With("component", "x").WithGroup("g")
			log.Debug("d", "k", 1)
			log.Info("i", "k", 1)
			log.Warn("w", "k", 1)
			log.Error("e", "k", 1)
			f.Close()
			b, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			want := []string{"<7>", "<6>", "<4>", "<3>"}
			if len(lines) != len(want) {
				t.Fatalf("%s, journal %v: %d lines, want %d:\n%s", format, journal, len(lines), len(want), b)
			}
			for i, line := range lines {
				rest, prefixed := strings.CutPrefix(line, want[i])
				if prefixed != journal {
					t.Errorf("%s, journal %v: line %q, want the prefix %s: %v", format, journal, line, want[i], journal)
				}
				if format == "json" && !json.Valid([]byte(rest)) {
					t.Errorf("%s, journal %v: not JSON after the prefix: %q", format, journal, line)
				}
				if !strings.Contains(rest, "component") || !strings.Contains(rest, "g.k") && !strings.Contains(rest, `"g":{"k":1}`) {
					t.Errorf("%s, journal %v: attributes or group lost: %q", format, journal, line)
				}
			}
		}
	}
}
