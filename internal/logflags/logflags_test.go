package logflags

import (
	"bytes"
	"encoding/json"
	"flag"
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
