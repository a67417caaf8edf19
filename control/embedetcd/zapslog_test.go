package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// recorder is a slog.Handler keeping every record.
type recorder struct {
	mu   sync.Mutex
	recs []string // "LEVEL message err=..."
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, b.String())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) records() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.recs...)
}

func TestSlogCoreLevels(t *testing.T) {
	for _, tc := range []struct {
		name    string
		closing bool
		msg     string
		err     error
		want    string // level of the slog record
	}{
		{"server closed", false, serveFailedMessage, http.ErrServerClosed, "DEBUG"},
		{"wrapped server closed", false, serveFailedMessage, fmt.Errorf("serve: %w", http.ErrServerClosed), "DEBUG"},
		{"cmux closed", false, serveFailedMessage, errors.New("mux: server closed"), "DEBUG"},
		{"real serve failure", false, serveFailedMessage, errors.New("listen tcp: address already in use"), "ERROR"},
		{"other error", false, "failed to publish local member", http.ErrServerClosed, "ERROR"},
		{"anything while closing", true, "failed to stop peer", errors.New("boom"), "DEBUG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			closing := new(atomic.Bool)
			closing.Store(tc.closing)
			lg := zap.New(&slogCore{logger: slog.New(rec), level: zapcore.ErrorLevel, closing: closing})
			lg.Error(tc.msg, zap.Error(tc.err))
			lg.Info("below the level")
			got := rec.records()
			if len(got) != 1 || !strings.HasPrefix(got[0], tc.want+" "+tc.msg) {
				t.Errorf("records = %q, want one %s record of %q", got, tc.want, tc.msg)
			}
		})
	}
}

// TestCloseLogsNoErrors starts and closes a member with etcd's most verbose
// logging and checks that its shutdown logged nothing at WARN or above,
// while the shutdown messages themselves ("... failed. error=http: Server
// closed") are still there at DEBUG.
func TestCloseLogsNoErrors(t *testing.T) {
	rec := &recorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, Options{Dir: t.TempDir(), Logger: slog.New(rec), LogLevel: "debug", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	before := len(rec.records()) // etcd warns about its test setup at start
	s.Close()
	sawClose := false
	for _, r := range rec.records()[before:] {
		if strings.HasPrefix(r, "WARN ") || strings.HasPrefix(r, "ERROR ") {
			t.Errorf("etcd logged %s", r)
		}
		if strings.HasPrefix(r, "DEBUG "+serveFailedMessage) {
			sawClose = true
		}
	}
	if !sawClose {
		t.Errorf("no DEBUG %q record on Close; were the shutdown messages dropped instead of downgraded?", serveFailedMessage)
	}
}
