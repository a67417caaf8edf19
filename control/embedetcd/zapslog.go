package embedetcd

import (
	"context"
	"log/slog"
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
	// closing is set when the member is being closed: etcd then reports its
	// listeners shutting down as errors, which are expected and logged at
	// debug level instead.
	closing *atomic.Bool
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.level && !c.closing.Load() }

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
	if c.closing.Load() && lvl > slog.LevelDebug {
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
