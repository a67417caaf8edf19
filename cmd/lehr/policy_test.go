package main

import (
	"encoding/json"
	"strings"
	"testing"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
)

// The policy preview workflow from the command line, as docs/preview.md
// tells it: create, start, list active, counts, a refused commit, commit;
// -o json with the API's field names and readable rule values.
func TestPolicyExperimentCLI(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "shop")
	live := `{"all": {"effect": "allow", "condition": "true"}}`
	if code, out, errOut := c.run(live, "push", "shop/fw", "--kind", "policy", "--file", "-"); code != exitOK {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	mustContain(t, "policy get", c.ok("policy", "get", "shop/fw"), "etag v1", "all", "allow", "true")

	rules := "all: {effect: allow, condition: 'true'}\neve: {effect: deny, condition: 'principal.user == \"eve\"', sensitive: [principal.token]}\n"
	code, out, errOut := c.run(rules, "policy", "experiment", "create", "shop/fw", "deny-eve", "-f", "-", "--annotation", "ticket=SEC-1")
	if code != exitOK {
		t.Fatalf("experiment create: exit %d\n%s%s", code, out, errOut)
	}
	mustContain(t, "create", out, "experiment domains/shop/policies/fw/experiments/deny-eve", "never previewed", "annotation ticket=SEC-1", "eve", "deny")

	mustContain(t, "start", c.ok("policy", "experiment", "start", "shop/fw", "deny-eve"), "ACTIVE since", `log lines begin "PolicyPreviewLog"`)
	mustContain(t, "list active", c.ok("policy", "experiment", "list", "shop/fw", "--active"), "deny-eve", "ACTIVE")

	var got struct {
		Name            string `json:"name"`
		Etag            string `json:"etag"`
		PreviewMetadata struct {
			State     string `json:"state"`
			LogPrefix string `json:"log_prefix"`
			StartTime string `json:"start_time"`
		} `json:"preview_metadata"`
		Policy struct {
			Rules []struct {
				Key   string         `json:"key"`
				Value map[string]any `json:"value"`
			} `json:"rules"`
		} `json:"policy"`
	}
	if err := json.Unmarshal([]byte(c.ok("policy", "experiment", "get", "shop/fw", "deny-eve", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.PreviewMetadata.State != "ACTIVE" || got.PreviewMetadata.LogPrefix != "PolicyPreviewLog" || got.PreviewMetadata.StartTime == "" ||
		len(got.Policy.Rules) != 2 || got.Policy.Rules[1].Value["effect"] != "deny" {
		t.Errorf("get -o json = %+v; want preview_metadata.state ACTIVE, log_prefix, start_time, rules as JSON", got)
	}

	mustContain(t, "eval", c.ok("policy", "eval", "shop/fw", "--input", `{"principal": {"user": "eve"}}`, "--experiment", "deny-eve"),
		"live", "v1", "allow", "deny-eve", got.Etag, "deny", "eve")
	mustContain(t, "counts", c.ok("policy", "experiment", "counts", "shop/fw", "deny-eve"), "no decisions counted yet")

	mustContain(t, "commit without etag", func() string {
		code, _, stderr := c.run("", "policy", "experiment", "commit", "shop/fw", "deny-eve")
		if code != exitUsage {
			t.Errorf("commit without --etag: exit %d", code)
		}
		return stderr
	}(), "needs --etag")
	mustContain(t, "commit with a stale etag", c.fails("policy", "experiment", "commit", "shop/fw", "deny-eve", "--etag", "0000"), "etag", "changed since you read it")
	mustContain(t, "commit gated", c.fails("policy", "experiment", "commit", "shop/fw", "deny-eve", "--etag", got.Etag, "--min-evaluations", "10"),
		"evaluated experiment etag", "0 times", "at least 10")
	mustContain(t, "commit", c.ok("policy", "experiment", "commit", "shop/fw", "deny-eve", "--etag", got.Etag, "--parent-etag", "v1"),
		"shop/fw is now at version 2", "lehr rollout status shop/fw")
	mustContain(t, "commit twice", c.fails("policy", "experiment", "commit", "shop/fw", "deny-eve", "--etag", got.Etag), "not found")
	if out := c.ok("policy", "get", "shop/fw"); !strings.Contains(out, "etag v2") || !strings.Contains(out, "eve") {
		t.Errorf("live policy after commit:\n%s", out)
	}
	mustContain(t, "list after", c.ok("policy", "experiment", "list", "shop/fw"), "no experiments")

	// Deleting the live policy deletes its experiments with it.
	if code, out, errOut := c.run(rules, "policy", "experiment", "create", "shop/fw", "later", "-f", "-"); code != exitOK {
		t.Fatalf("create later: exit %d\n%s%s", code, out, errOut)
	}
	mustContain(t, "delete with a stale etag", c.fails("policy", "delete", "shop/fw", "--etag", "v1"), "not the live policy's etag", "nothing was deleted")
	var md struct {
		Version struct {
			Seq uint64 `json:"seq"`
		} `json:"version"`
		DeletedExperiments []string `json:"deleted_experiments"`
	}
	if err := json.Unmarshal([]byte(c.ok("policy", "delete", "shop/fw", "--etag", "v2", "-m", "retire", "-o", "json")), &md); err != nil {
		t.Fatal(err)
	}
	if md.Version.Seq != 3 || len(md.DeletedExperiments) != 1 || md.DeletedExperiments[0] != "domains/shop/policies/fw/experiments/later" {
		t.Errorf("delete -o json: %+v; want version 3 and the experiment later", md)
	}
	mustContain(t, "get after delete", c.fails("policy", "get", "shop/fw"), "was deleted", "creates it again")
	mustContain(t, "rollback undoes the delete", c.ok("rollback", "shop/fw", "--to", "2"), "4")
	mustContain(t, "get after the rollback", c.ok("policy", "get", "shop/fw"), "etag v4", "eve")
}

// What "lehr policy experiment commit" says its canary analysis expects:
// the deny share's change and, when a rollout canaries the version, the
// share of decisions changed — which an experiment flipping decisions both
// ways has though its deny share does not move (issue 30, item 4).
func TestWriteCommit(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	v := &lehrpb.VersionInfo{Seq: 2, Parent: 1}
	for _, tc := range []struct {
		name string
		md   *lehrpb.CommitPolicyExperimentMetadata
		want string
	}{
		{"a flip both ways", &lehrpb.CommitPolicyExperimentMetadata{Version: v, ExpectedDenyChange: f(0), ExpectedDisagreement: f(0.5)},
			"committed experiment flip: shop/fw is now at version 2 (etag v2); the experiment is deleted\n" +
				"its canary analysis expects the share of denied decisions to change by +0 percentage points on the canary hosts, as previewed (check \"policy deny ratio\")\n" +
				"and the canary hosts to decide 50 % of decisions otherwise than version 1 would, the share the preview disagreed on (check \"policy disagreement\")\n" +
				"follow its rollout: lehr rollout status shop/fw\n"},
		{"no rollout to canary it", &lehrpb.CommitPolicyExperimentMetadata{Version: v, ExpectedDenyChange: f(0.25)},
			"committed experiment flip: shop/fw is now at version 2 (etag v2); the experiment is deleted\n" +
				"its canary analysis expects the share of denied decisions to change by +25 percentage points on the canary hosts, as previewed (check \"policy deny ratio\")\n" +
				"follow its rollout: lehr rollout status shop/fw\n"},
		{"too few decisions", &lehrpb.CommitPolicyExperimentMetadata{Version: v},
			"committed experiment flip: shop/fw is now at version 2 (etag v2); the experiment is deleted\n" +
				"the hosts counted fewer than 100 decisions of it: its canary analysis expects no particular change of the deny share\n" +
				"follow its rollout: lehr rollout status shop/fw\n"},
	} {
		var b strings.Builder
		writeCommit(&b, "flip", "shop/fw", tc.md)
		if b.String() != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, b.String(), tc.want)
		}
	}
}
