package bench

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// eventKey identifies one debug event a component logs: its message, the
// namespace and the version it names.
type eventKey struct {
	msg     string
	ns      string
	version uint64
}

// eventLog is a slog.Handler that records the time of selected Debug
// records (by message) and forwards records at or above a level to
// another handler. It lets a scenario timestamp hops inside components
// through the logs they already write, without hooks in their APIs. The
// time recorded is the record's own (taken when the component called the
// logger), so handler cost does not skew it.
type eventLog struct {
	next  slog.Handler
	level slog.Level
	want  map[string]bool

	attrs []slog.Attr
	st    *eventStore
}

type eventStore struct {
	mu     sync.Mutex
	events map[eventKey]time.Time
}

// newEventLog returns a handler recording the messages in want and
// forwarding records at level or above to next.
func newEventLog(next slog.Handler, level slog.Level, want ...string) *eventLog {
	w := map[string]bool{}
	for _, m := range want {
		w[m] = true
	}
	return &eventLog{next: next, level: level, want: w, st: &eventStore{events: map[eventKey]time.Time{}}}
}

func (h *eventLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level || (l == slog.LevelDebug && len(h.want) > 0)
}

func (h *eventLog) Handle(ctx context.Context, r slog.Record) error {
	if h.want[r.Message] {
		k := eventKey{msg: r.Message}
		get := func(a slog.Attr) {
			switch a.Key {
			case "namespace":
				k.ns = a.Value.String()
			case "version":
				switch a.Value.Kind() {
				case slog.KindUint64:
					k.version = a.Value.Uint64()
				case slog.KindInt64:
					k.version = uint64(a.Value.Int64())
				}
			}
		}
		for _, a := range h.attrs {
			get(a)
		}
		r.Attrs(func(a slog.Attr) bool { get(a); return true })
		h.st.mu.Lock()
		if _, ok := h.st.events[k]; !ok { // first occurrence wins
			h.st.events[k] = r.Time
		}
		h.st.mu.Unlock()
	}
	if r.Level >= h.level {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *eventLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	c.next = h.next.WithAttrs(attrs)
	return &c
}

func (h *eventLog) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// at returns when msg was first logged for ns at version.
func (h *eventLog) at(msg, ns string, version uint64) (time.Time, bool) {
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	t, ok := h.st.events[eventKey{msg, ns, version}]
	return t, ok
}
