package fanout

import (
	"io"
	"log/slog"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// An Ack wakes the session's push loop only when it has something to do
// after it: the namespace moved on while the update was in flight, or the
// update was refused. An Ack of the goal — every delivery of a fan-out —
// wakes nobody.
func TestAckWakesPushLoopOnlyWhenNeeded(t *testing.T) {
	v1 := &content.Version{Seq: 1, Checksum: "c1"}
	v2 := &content.Version{Seq: 2, Checksum: "c2"}
	v3 := &content.Version{Seq: 3, Checksum: "c3"}
	for _, tc := range []struct {
		name       string
		goal       *content.Version // nil: no goal any more
		subscribed bool
		ack        *lehrpb.Ack
		wantKick   bool
	}{
		{"ack of the goal", v2, true, &lehrpb.Ack{Namespace: "d/a", Ok: true, Version: 2, Checksum: "c2", UpdateVersion: 2}, false},
		{"goal moved on in flight", v3, true, &lehrpb.Ack{Namespace: "d/a", Ok: true, Version: 2, Checksum: "c2", UpdateVersion: 2}, true},
		{"refused", v2, true, &lehrpb.Ack{Namespace: "d/a", Ok: false, Version: 1, Checksum: "c1", UpdateVersion: 2, Error: "no"}, true},
		{"another checksum than sent", v2, true, &lehrpb.Ack{Namespace: "d/a", Ok: true, Version: 2, Checksum: "cX", UpdateVersion: 2}, true},
		{"goal gone in flight", nil, true, &lehrpb.Ack{Namespace: "d/a", Ok: true, Version: 2, Checksum: "c2", UpdateVersion: 2}, true},
		{"unsubscribed in flight", v3, false, &lehrpb.Ack{Namespace: "d/a", Ok: true, Version: 2, Checksum: "c2", UpdateVersion: 2}, false},
		{"stray ack", v2, true, &lehrpb.Ack{Namespace: "d/a", Ok: true, Version: 1, Checksum: "c1", UpdateVersion: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{sessions: map[string]*session{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			s.met = newServerMetrics(metrics.NewSet(), s)
			goals := map[string]*Goal{}
			if tc.goal != nil {
				goals["d/a"] = &Goal{Stable: tc.goal}
			}
			s.goals.Store(&goals)
			// A round runs (pushing), so a kick asks it for another (again).
			ss := &session{srv: s, host: "h", log: s.log, pushing: true, ns: map[string]*nsState{
				"d/a": {subscribed: tc.subscribed, have: v1.Ref(), sending: v2.Ref()},
			}}
			if err := ss.onAck(tc.ack); err != nil {
				t.Fatal(err)
			}
			if got := ss.again; got != tc.wantKick {
				t.Errorf("push loop kicked = %v; want %v", got, tc.wantKick)
			}
		})
	}
}
