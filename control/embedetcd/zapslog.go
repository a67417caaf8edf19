package embedetcd

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"go.uber.org/zap/zapcore"
)

// slogCore is a zapcore.Core that forwards etcd's zap log entries at or above
// level to a slog.Logger, so etcd's messages land in the same structured log
// as everything else instead of on stderr.
type slogCore struct {
	logger *slog.Logger
	level  zapcore.Level
	fields []zapcore.Field
	// closing is set when the member is being closed: whatever etcd logs
	// then (listeners shutting down, connections cut) is expected and is
	// logged at debug level instead.
	closing *atomic.Bool
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.level }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{
		logger:  c.logger,
		level:   c.level,
		fields:  append(append([]zapcore.Field(nil), c.fields...), fields...),
		closing: c.closing,
	}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	lvl := slogLevel(e.Level)
	if lvl > slog.LevelDebug && (c.closing.Load() || shutdownNoise(e.Message, fields)) {
		lvl = slog.LevelDebug
	}
	c.logger.LogAttrs(context.Background(), lvl, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

// serveFailedMessage is what etcd logs when one of its HTTP or gRPC servers
// returns, including when etcd itself closed it.
const serveFailedMessage = "setting up serving from embedded etcd failed."

// shutdownNoise reports whether an entry is etcd announcing that a server
// it closed has stopped: "setting up serving from embedded etcd failed"
// with http.ErrServerClosed, net.ErrClosed or cmux's "mux: server closed" /
// "mux: listener closed". etcd logs it at ERROR whenever it closes its
// listeners, also when it cleans up after a failed start (before Close can
// set closing), so it is recognised by content, not only while closing.
func shutdownNoise(msg string, fields []zapcore.Field) bool {
	if msg != serveFailedMessage {
		return false
	}
	for _, f := range fields {
		err, ok := f.Interface.(error)
		if f.Type != zapcore.ErrorType || !ok {
			continue
		}
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
			return true
		}
		// cmux (which etcd uses, but Lehr does not import) and older net
		// code: match the text.
		if s := err.Error(); strings.Contains(s, "mux: server closed") || strings.Contains(s, "mux: listener closed") ||
			strings.Contains(s, "use of closed network connection") {
			return true
		}
	}
	return false
}
