package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// poison is what a hostile writer stores to drive the terminal of whoever
// reads it: an OSC title, a bell, a screen clear, a carriage return, a
// right-to-left override, C1's CSI, DEL, a byte that is not UTF-8, a tab
// to forge a column and a newline to forge a line.
const poison = "p\x1b]0;owned\x07\x1b[2J\r\u202e\u009b\x7f\xff\tCOLUMN\nFORGED"

// fill sets every string field of m, and of the messages it holds, to
// poison, every bytes field to poison's bytes, and puts one poisoned
// element in every list and map.
func fill(m protoreflect.Message, depth int) {
	if depth > 6 {
		return
	}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			key := protoreflect.ValueOfString(poison).MapKey()
			if fd.MapKey().Kind() != protoreflect.StringKind {
				continue
			}
			switch fd.MapValue().Kind() {
			case protoreflect.StringKind:
				mp.Set(key, protoreflect.ValueOfString(poison))
			case protoreflect.MessageKind:
				v := mp.NewValue()
				fill(v.Message(), depth+1)
				mp.Set(key, v)
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			switch fd.Kind() {
			case protoreflect.StringKind:
				l.Append(protoreflect.ValueOfString(poison))
			case protoreflect.BytesKind:
				l.Append(protoreflect.ValueOfBytes([]byte(poison)))
			case protoreflect.MessageKind:
				v := l.NewElement()
				fill(v.Message(), depth+1)
				l.Append(v)
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(poison))
		case fd.Kind() == protoreflect.BytesKind:
			m.Set(fd, protoreflect.ValueOfBytes([]byte(poison)))
		case fd.Kind() == protoreflect.MessageKind:
			fill(m.Mutable(fd).Message(), depth+1)
		}
	}
}

// poisoned returns a new message of m's type, filled with poison.
func poisoned[M proto.Message](m M) M {
	fill(m.ProtoReflect(), 0)
	return m
}

// checkTerminalSafe fails unless out is UTF-8 without a control character
// other than newline (the output's own lines), a bidirectional control or
// a line separator, and no line of it starts with what followed a newline
// in poison.
func checkTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !strings.Contains(out, "p") {
		t.Errorf("%s: printed nothing of the poisoned data:\n%s", what, out)
	}
	for i, r := range out {
		if r == '\n' {
			continue
		}
		if r == utf8.RuneError || unicode.IsControl(r) || r == '\u202e' || r == '\u2028' {
			t.Errorf("%s: raw %U at byte %d of the output:\n%q", what, r, i, out)
			return
		}
	}
	if strings.Contains(out, "\nFORGED") {
		t.Errorf("%s: the stored newline starts a line of its own:\n%s", what, out)
	}
}

// Every text output of lehr escapes what it did not write itself (issue
// 28, item 7): each output function is fed data whose every string is
// poison.
func TestTextOutputsEscapeStoredData(t *testing.T) {
	vi := func() *lehrpb.VersionInfo { return poisoned(&lehrpb.VersionInfo{}) }
	prop := producer.Property{Key: poison, ContentType: poison, Value: []byte(poison)}
	text := producer.Property{Key: poison, ContentType: poison, Value: []byte("line one\r\nline two \u202e owned\rover")}
	view := &fixedView{ns: poison, checksum: poison, author: poison, message: poison, version: 2,
		props: map[string]string{poison: poison, "k": "v\x1b[2J"}, types: map[string]string{poison: poison}}
	old := &fixedView{ns: poison, version: 1, props: map[string]string{"k": "w", "gone": poison}}
	outputs := map[string]func(w io.Writer){
		"get": func(w io.Writer) {
			writeVersion(w, &producer.Version{Info: vi(), Properties: []producer.Property{prop, text}})
		},
		"history": func(w io.Writer) { writeHistory(w, []*lehrpb.VersionInfo{vi()}) },
		"diff": func(w io.Writer) {
			writeDiff(w, &producer.Diff{From: vi(), To: vi(), Changes: []producer.Change{{Key: poison, Old: &prop, New: &text}, {Key: poison, New: &prop}}})
		},
		"push":          func(w io.Writer) { writeCommitted(w, "published", vi()) },
		"domain get":    func(w io.Writer) { writeDomain(w, poisoned(&lehrpb.Domain{})) },
		"domain list":   func(w io.Writer) { writeDomains(w, []*lehrpb.Domain{poisoned(&lehrpb.Domain{})}) },
		"zones list":    func(w io.Writer) { writeZones(w, []*lehrpb.Zone{poisoned(&lehrpb.Zone{})}) },
		"goals":         func(w io.Writer) { writeGoals(w, poison, poisoned(&lehrpb.GetGoalsResponse{})) },
		"goals --watch": func(w io.Writer) { writeGoalEvents(w, poisoned(&lehrpb.WatchGoalsResponse{}), "") },
		"zones status": func(w io.Writer) {
			writeZoneStatus(w, poisoned(&lehrpb.GetZoneStatusResponse{}), map[string]uint64{poison: 1}, true)
		},
		"zones status, no goals": func(w io.Writer) {
			writeZoneStatus(w, poisoned(&lehrpb.GetZoneStatusResponse{}), nil, false)
		},
		"audit":      func(w io.Writer) { writeAudit(w, []*lehrpb.AuditRecord{poisoned(&lehrpb.AuditRecord{})}) },
		"canary get": func(w io.Writer) { writeEvaluation(w, poisoned(&lehrpb.CanaryEvaluation{})) },
		"canary list": func(w io.Writer) {
			writeEvaluations(w, []*lehrpb.CanaryEvaluation{poisoned(&lehrpb.CanaryEvaluation{})})
		},
		"rollout policy get": func(w io.Writer) { writePolicyStatus(w, poison, poisoned(&lehrpb.GetRolloutPolicyResponse{})) },
		"rollout policy history": func(w io.Writer) {
			writePolicyHistory(w, poison, []*lehrpb.RolloutPolicyRecord{poisoned(&lehrpb.RolloutPolicyRecord{})})
		},
		"rollout status":        func(w io.Writer) { writeRollout(w, poisoned(&lehrpb.Rollout{})) },
		"rollout events":        func(w io.Writer) { writeRolloutEvents(w, []*lehrpb.RolloutEvent{poisoned(&lehrpb.RolloutEvent{})}) },
		"rollout list":          func(w io.Writer) { writeRollouts(w, []*lehrpb.Rollout{poisoned(&lehrpb.Rollout{})}) },
		"policy rules":          func(w io.Writer) { writeRules(w, []*lehrpb.Property{poisoned(&lehrpb.Property{})}) },
		"policy experiment get": func(w io.Writer) { writeExperiment(w, poisoned(&lehrpb.PolicyExperiment{})) },
		"policy experiment list": func(w io.Writer) {
			writeExperiments(w, []*lehrpb.PolicyExperiment{poisoned(&lehrpb.PolicyExperiment{})})
		},
		"policy counts": func(w io.Writer) { writeCounts(w, poisoned(&lehrpb.PolicyExperimentCounts{})) },
		"policy experiment commit": func(w io.Writer) {
			writeCommit(w, poison, poison, poisoned(&lehrpb.CommitPolicyExperimentMetadata{}))
		},
		"watch": func(w io.Writer) {
			p := newWatchPrinter(w, false)
			p.print(nil, view)
			p.print(old, view)
		},
		"an error": func(w io.Writer) {
			err := apierror.New(codes.InvalidArgument, poison, poison, "%s", poison).WithLimit("%s", poison)
			reportError(&env{stderr: w}, "lehr push", fmt.Errorf("producer: publish: %w", err), errorContext{control: "127.0.0.1:7400"})
			reportError(&env{stderr: w}, "lehr push", fmt.Errorf("%s", poison), errorContext{})
		},
	}
	for name, write := range outputs {
		var b bytes.Buffer
		write(&b)
		checkTerminalSafe(t, name, b.String())
	}
}

// The attack of issue 28, item 7, end to end against a real control: an
// escape sequence in --message (and an author asserted in dev mode) is
// stored as sent — -o json has it exactly — and shown escaped by lehr
// history, lehr audit and lehr get.
func TestStoredEscapesAreShownEscaped(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "demo")
	const msg = "fix\x1b]0;pwned\x07\x1b[2J\rforged\u202e"
	file := t.TempDir() + "/app.json"
	if err := os.WriteFile(file, []byte(`{"a": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("push", "demo/app", "--file", file, "--message", msg)
	for _, args := range [][]string{{"history", "demo/app"}, {"audit", "--domain", "demo"}, {"get", "demo/app"}} {
		out := c.ok(args...)
		checkTerminalSafe(t, "lehr "+strings.Join(args, " "), out)
		if !strings.Contains(out, `fix\x1b]0;pwned\x07\x1b[2J\rforged\u202e`) {
			t.Errorf("lehr %s does not show the message escaped:\n%s", strings.Join(args, " "), out)
		}
	}
	if out := c.ok("history", "demo/app", "-o", "json"); !strings.Contains(out, `fix\u001b]0;pwned\u0007\u001b[2J\rforged`) {
		t.Errorf("lehr history -o json lost the exact message:\n%s", out)
	}
}
