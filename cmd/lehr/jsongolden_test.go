package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// jsonNoise is what changes from run to run in lehr's JSON: times,
// signatures and their keys, loopback ports, store revisions and
// request-scoped ids. normalizeJSON replaces each with a placeholder.
var jsonNoise = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"`), `"<time>"`},
	{regexp.MustCompile(`("signature": \{\s*"base64": )"[^"]*"`), `$1"<signature>"`},
	{regexp.MustCompile(`("signature_key_id": )"[^"]*"`), `$1"<key id>"`},
	{regexp.MustCompile(`127\.0\.0\.1:\d+`), `127.0.0.1:<port>`},
	{regexp.MustCompile(`("(?:revision|create_revision|mod_revision)": )\d+`), `$1"<revision>"`},
	{regexp.MustCompile(`\b\d\d:\d\d:\d\d UTC\b`), `<time> UTC`},
	{regexp.MustCompile(`("stored_bytes": )\d+`), `$1"<bytes>"`},
	{regexp.MustCompile(`("etag": "r)\d+"`), `$1<revision>"`},
	{regexp.MustCompile(`(unix:uid=)\d+`), `$1<uid>`},
	{regexp.MustCompile(`(pid=)\d+`), `$1<pid>`},
}

func normalizeJSON(s string) string {
	for _, n := range jsonNoise {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return s
}

// TestJSONOutputGolden runs every client command that has -o json against
// a real control, as a user would, and keeps what each prints (noise
// normalized) in testdata/json-commands.golden: the one shape of
// docs/cli.md, command by command. Control status, store status, zone
// status with distributors and canary evaluations, whose numbers a test
// control cannot make repeatable, are in TestJSONOfMessagesGolden.
func TestJSONOutputGolden(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{Rollouts: true, RolloutInterval: 50 * time.Millisecond})
	c := cli{t: t, addr: srv.Addr}
	var b strings.Builder
	// j runs lehr args -o json (with stdin in) and records what it prints.
	exits := func(want int, in string, args ...string) string {
		t.Helper()
		code, out, errOut := c.run(in, append(args, "-o", "json")...)
		if code != want {
			t.Fatalf("lehr %s -o json: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
		fmt.Fprintf(&b, "$ lehr %s -o json\n%s\n", strings.Join(args, " "), normalizeJSON(out))
		if code != exitOK {
			fmt.Fprintf(&b, "(exit %d)\n\n", code)
		}
		return out
	}
	j := func(in string, args ...string) string {
		t.Helper()
		return exits(exitOK, in, args...)
	}
	rolloutIs := func(what string, ns string, ok func(*lehrpb.Rollout) bool) {
		t.Helper()
		wait.For(t, what, func() bool {
			var r lehrpb.Rollout
			code, out, _ := c.run("", "rollout", "status", ns, "-o", "json")
			return code == exitOK && parseJSON(out, &r) == nil && ok(&r)
		})
	}

	// Domains and zones.
	j("", "domain", "create", "pay", "--description", "payment limits", "--publisher", "tester", "--max-properties", "50")
	j("", "domain", "update", "pay", "--operators", "oncall")
	j("", "domain", "get", "pay")
	j("", "domain", "list")
	j("", "zones", "create", "zone-a")
	j("", "zones", "create", "zone-old")
	j("", "zones", "delete", "zone-old")
	j("", "zones", "list")

	// Versions: text, JSON, YAML and bytes values.
	j(`{"greeting": "hello", "limits": {"rps": 100}, "ratio": 0.5}`, "push", "pay/limits", "--file", "-", "--message", "first cut")
	j("", "get", "pay/limits")
	j("", "get", "pay/limits", "--key", "limits")
	exits(exitNoRollout, "", "rollout", "wait", "pay/limits", "--timeout", "30s")

	// A rollout: it waits for canary samples no distributor sends.
	j("", "patch", "pay/limits", "--base", "1", "--set-json", "limits={\"rps\": 250}", "--set", "motd=maintenance at 18:00", "--delete", "ratio", "-m", "more headroom")
	j("", "history", "pay/limits")
	j("", "diff", "pay/limits", "1", "2")
	rolloutIs("the rollout waiting for canary samples", "pay/limits", func(r *lehrpb.Rollout) bool {
		return strings.Contains(r.GetReason(), "waiting for the distributors of zone-a to sample canary hosts")
	})
	j("", "rollout", "status", "pay/limits")
	j("", "rollout", "list", "--active")
	j("", "goals", "zone-a")
	j("", "rollout", "pause", "pay/limits", "-m", "looking into it")
	rolloutIs("the rollout paused", "pay/limits", func(r *lehrpb.Rollout) bool { return r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_PAUSED })
	j("", "rollout", "resume", "pay/limits")
	rolloutIs("the rollout running", "pay/limits", func(r *lehrpb.Rollout) bool { return r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_RUNNING })
	j("", "rollout", "abort", "pay/limits", "-m", "not today")
	rolloutIs("the rollout aborted", "pay/limits", func(r *lehrpb.Rollout) bool { return r.GetRollbackVersion() != 0 })
	exits(exitError, "", "rollout", "wait", "pay/limits", "--version", "2", "--timeout", "30s")
	j("", "rollout", "events", "pay/limits")
	j("", "rollback", "pay/limits", "--to", "2", "-m", "after all")
	j("", "history", "compact", "pay/limits", "--keep", "1")

	// Rollout policies.
	j("stages:\n  - {name: canary, canary: {hosts: 1}, bake: 90s, max_error_ratio: 0.01}\n  - {name: rest, zones: {}}\n",
		"rollout", "policy", "set", "pay", "-f", "-", "-m", "slower canary")
	j("", "rollout", "policy", "get", "pay/limits")
	j("", "rollout", "policy", "delete", "pay", "-m", "back to the default")
	j("", "rollout", "policy", "history", "pay")

	// Policies and an experiment.
	j("", "domain", "create", "shop")
	j(`{"all": {"effect": "allow", "condition": "true"}}`, "push", "shop/fw", "--kind", "policy", "--file", "-")
	j("", "policy", "get", "shop/fw")
	j(`{"principal": {"user": "eve"}}`, "policy", "eval", "shop/fw", "--input", `{"principal": {"user": "eve"}}`)
	j("all: {effect: allow, condition: 'true'}\neve: {effect: deny, condition: 'principal.user == \"eve\"'}\n",
		"policy", "experiment", "create", "shop/fw", "deny-eve", "-f", "-", "--annotation", "ticket=SEC-1")
	j("", "policy", "experiment", "update", "shop/fw", "deny-eve", "--annotation", "reviewed=yes")
	j("", "policy", "experiment", "start", "shop/fw", "deny-eve")
	var x lehrpb.PolicyExperiment
	decodeJSON(t, j("", "policy", "experiment", "get", "shop/fw", "deny-eve"), &x)
	j("", "policy", "experiment", "list", "shop/fw", "--active")
	j("", "policy", "experiment", "counts", "shop/fw", "deny-eve")
	j("", "policy", "experiment", "stop", "shop/fw", "deny-eve")
	j("{}", "policy", "experiment", "create", "shop/fw", "later", "-f", "-")
	j("", "policy", "experiment", "delete", "shop/fw", "later")
	j("", "policy", "experiment", "commit", "shop/fw", "deny-eve", "--etag", x.GetEtag(), "--parent-etag", "v1", "-m", "deny eve")
	j("", "policy", "delete", "shop/fw", "-m", "retire")

	// Canary analysis: control's (none without distributors), and the
	// judge on a generated fleet.
	j("", "canary", "list")
	code, fleet, errOut := c.run("", "canary", "generate", "error-ratio-x5", "--seed", "3")
	if code != exitOK {
		t.Fatalf("canary generate: exit %d\n%s", code, errOut)
	}
	code, out, errOut := c.run(fleet, "canary", "judge", "--input", "-", "-o", "json")
	if code != exitCanaryFail {
		t.Fatalf("canary judge: exit %d, want %d (FAIL)\n%s%s", code, exitCanaryFail, out, errOut)
	}
	fmt.Fprintf(&b, "$ lehr canary generate error-ratio-x5 --seed 3 | lehr canary judge --input - -o json\n%s\n", out)

	// The audit log, and deletions.
	j("", "audit", "--domain", "shop", "--limit", "3")
	j("", "delete", "pay/limits", "--force", "-m", "done")
	j("", "domain", "delete", "pay", "--force")

	golden(t, "json-commands", []byte(b.String()))
}

// sample sets every field of m, and of the messages it holds, to a value
// of its kind (a 64-bit integer above 2^32, bytes that are not text, an
// enum's last value, one element in every list and map), so that the
// golden shows how lehr's JSON writes each.
func sample(m protoreflect.Message, depth int) {
	switch m.Descriptor().FullName() {
	case "google.protobuf.Timestamp":
		m.Set(m.Descriptor().Fields().ByName("seconds"), protoreflect.ValueOfInt64(t0.Unix()))
		return
	case "google.protobuf.Duration":
		m.Set(m.Descriptor().Fields().ByName("seconds"), protoreflect.ValueOfInt64(90))
		return
	}
	if depth > 5 {
		return
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && od.Fields().Get(0) != fd {
			continue // one member of each oneof
		}
		switch {
		case fd.IsMap():
			if fd.MapKey().Kind() != protoreflect.StringKind {
				continue
			}
			mp := m.Mutable(fd).Map()
			v := mp.NewValue()
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				sample(v.Message(), depth+1)
			} else {
				v = sampleScalar(fd.MapValue())
			}
			mp.Set(protoreflect.ValueOfString("key").MapKey(), v)
		case fd.IsList():
			l := m.Mutable(fd).List()
			if fd.Kind() == protoreflect.MessageKind {
				v := l.NewElement()
				sample(v.Message(), depth+1)
				l.Append(v)
			} else {
				l.Append(sampleScalar(fd))
			}
		case fd.Kind() == protoreflect.MessageKind:
			sample(m.Mutable(fd).Message(), depth+1)
		default:
			m.Set(fd, sampleScalar(fd))
		}
	}
}

func sampleScalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(3)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(3)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(1<<33 + 1)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1<<33 + 1)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(0.25)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(0.25)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(fd.Name()))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{0, 1, 0xfe, 0xff})
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(vs.Len() - 1).Number())
	}
	panic(fmt.Sprintf("field %s: kind %v", fd.FullName(), fd.Kind()))
}

// TestJSONOfMessagesGolden keeps the -o json of the commands whose output
// a test control cannot make repeatable — their messages with every field
// set (sample) — in testdata/json-messages.golden.
func TestJSONOfMessagesGolden(t *testing.T) {
	var b strings.Builder
	for _, c := range []struct {
		cmd string
		m   proto.Message
	}{
		{"lehr canary show ID -o json", &lehrpb.CanaryEvaluation{}},
		{"lehr canary list -o json", &lehrpb.ListCanaryEvaluationsResponse{}},
		{"lehr canary history NS -o json", &lehrpb.CanaryHistory{}},
		{"lehr canary forget NS -o json", &lehrpb.ForgetCanaryHistoryResponse{}},
		{"lehr zones status ZONE -o json", &lehrpb.GetZoneStatusResponse{}},
		{"lehr goals ZONE --watch -o json (one per message)", &lehrpb.WatchGoalsResponse{}},
		{"lehr store -o json", &lehrpb.StoreStatus{}},
		{"lehr control status -o json", &lehrpb.ControlStatus{}},
		{"lehr policy experiment counts NS ID -o json", &lehrpb.PolicyExperimentCounts{}},
	} {
		sample(c.m.ProtoReflect(), 0)
		out, err := marshalJSON(c.m)
		if err != nil {
			t.Fatalf("%s: %v", c.cmd, err)
		}
		fmt.Fprintf(&b, "$ %s\n%s\n\n", c.cmd, out)
		// It reads back whole.
		back := c.m.ProtoReflect().New().Interface()
		decodeJSON(t, string(out), back)
		if !proto.Equal(back, c.m) {
			t.Errorf("%s: read back %v, want %v", c.cmd, back, c.m)
		}
	}
	golden(t, "json-messages", []byte(b.String()))
}
