package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// suggested returns the lehr commands an error message suggests (quoted
// 'lehr …') that start with prefix, as argument lists without "lehr".
func suggested(t *testing.T, msg, prefix string) [][]string {
	t.Helper()
	var out [][]string
	for _, m := range regexp.MustCompile(`'lehr ([^']+)'`).FindAllStringSubmatch(msg, -1) {
		if strings.HasPrefix(m[1], prefix) {
			out = append(out, strings.Fields(m[1]))
		}
	}
	if len(out) == 0 {
		t.Fatalf("the error suggests no 'lehr %s…':\n%s", prefix, msg)
	}
	return out
}

// report makes zone-a's distributor d1 report agents holding ns (none
// for agents 0), as a distributor's ReportZoneStatus does.
func report(t *testing.T, cl lehrpb.ControlClient, ns string, agents int32) {
	t.Helper()
	req := &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: agents}
	if agents > 0 {
		req.Versions = []*lehrpb.VersionCount{{Namespace: ns, Version: 1, Agents: agents}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.ReportZoneStatus(ctx, req); err != nil {
		t.Fatal(err)
	}
}

// lehr delete and lehr domain delete: each refusal says what to do, and
// doing it works — the etag it names, removing the subscriptions, --force,
// deleting a domain's namespaces first.
func TestDeleteCLI(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay")
	c.ok("zones", "create", "zone-a")
	for _, in := range []string{`{"rps": 1}`, `{"rps": 2}`} {
		if code, out, errOut := c.run(in, "push", "pay/limits", "--file", "-"); code != exitOK {
			t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
		}
	}
	if code, out, errOut := c.run(`{"k": 1}`, "push", "pay/other", "--file", "-"); code != exitOK {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}

	// A stale etag names the current one; deleting with it gets past it.
	errOut := c.fails("delete", "pay/limits", "--etag", "v1")
	mustContain(t, "a stale etag", errOut, "ETAG_MISMATCH (Aborted)", "nothing was deleted", "--etag v2")
	// In use: the refusal names the zone and its hosts, and both ways out.
	report(t, srv.Client, "pay/limits", 2)
	errOut = c.fails("delete", "pay/limits", "--etag", "v2")
	mustContain(t, "in use", errOut, "NAMESPACE_IN_USE (FailedPrecondition)", "zone zone-a: 2 hosts", "Remove the subscriptions first")
	// Way out 1: the subscriptions go (the distributor reports none).
	report(t, srv.Client, "", 0)
	mustContain(t, "delete", c.ok("delete", "pay/limits", "--etag", "v2", "--message", "retired"),
		"deleted pay/limits (versions 1 to 2", "published again, it starts at version 3")
	mustContain(t, "get after delete", c.fails("get", "pay/limits"), "NOT_FOUND")
	// Way out 2: --force, as the refusal suggests.
	if code, out, errOut := c.run(`{"rps": 3}`, "push", "pay/limits", "--file", "-"); code != exitOK || !strings.Contains(out, "version 3") {
		t.Fatalf("push after delete: exit %d\n%s%s", code, out, errOut)
	}
	report(t, srv.Client, "pay/limits", 1)
	for _, fix := range suggested(t, c.fails("delete", "pay/limits"), "delete") {
		out := c.ok(append(fix, "-o", "json")...)
		var n lehrpb.Namespace
		if err := parseJSON(out, &n); err != nil || n.GetName() != "pay/limits" || n.GetEtag() != "v3" {
			t.Errorf("lehr %s -o json: %v\n%s; want the namespace as deleted", strings.Join(fix, " "), err, out)
		}
	}

	// A domain with namespaces: delete them first, as suggested…
	errOut = c.fails("domain", "delete", "pay")
	mustContain(t, "a domain with namespaces", errOut, "DOMAIN_NOT_EMPTY (FailedPrecondition)", "1 namespace (pay/other)")
	for _, fix := range suggested(t, errOut, "delete ") {
		c.ok(fix...)
	}
	mustContain(t, "domain delete", c.ok("domain", "delete", "pay"), "deleted domain pay (0 namespaces")
	// …or with --force, once past a stale etag.
	c.ok("domain", "create", "shop")
	if code, out, errOut := c.run(`{"k": 1}`, "push", "shop/a", "--file", "-"); code != exitOK {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	errOut = c.fails("domain", "delete", "shop", "--etag", "r1")
	mustContain(t, "a stale domain etag", errOut, "ETAG_MISMATCH")
	etag := regexp.MustCompile(`--etag (r\d+)`).FindStringSubmatch(errOut)
	if etag == nil {
		t.Fatalf("the refusal names no etag:\n%s", errOut)
	}
	errOut = c.fails("domain", "delete", "shop", "--etag", etag[1])
	mustContain(t, "shop with a namespace", errOut, "DOMAIN_NOT_EMPTY")
	for _, fix := range suggested(t, errOut, "domain delete") {
		mustContain(t, "domain delete --force", c.ok(fix...), "deleted domain shop (1 namespace")
	}
	mustContain(t, "domain get after delete", c.fails("domain", "get", "shop"), "NOT_FOUND")
	mustContain(t, "audit", c.ok("audit", "--limit", "100"), "DeleteNamespace", "DeleteDomain", "force=true; deleted 1 namespace(s), 1 version(s)")
}

// A rollout in flight refuses the deletion; aborting it, as suggested,
// or --force gets past it.
func TestDeleteRolloutInFlightCLI(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{Rollouts: true, RolloutInterval: 50 * time.Millisecond})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay")
	c.ok("zones", "create", "zone-a")
	for _, ns := range []string{"pay/limits", "pay/rules"} {
		for _, in := range []string{"limit: 10\n", "limit: 20\n"} {
			if code, out, errOut := c.run(in, "push", ns, "--file", "-"); code != exitOK {
				t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
			}
		}
		wait.For(t, "the rollout of "+ns+"@2 to run", func() bool {
			code, out, _ := c.run("", "rollout", "status", ns)
			return code == exitOK && strings.Contains(out, "RUNNING")
		})
	}
	errOut := c.fails("delete", "pay/limits")
	mustContain(t, "a rollout in flight", errOut, "ROLLOUT_IN_FLIGHT (FailedPrecondition)", "pay/limits@2 is running")
	for _, fix := range suggested(t, errOut, "rollout abort") {
		c.ok(fix...)
	}
	wait.For(t, "the rollout aborted", func() bool {
		code, out, _ := c.run("", "rollout", "status", "pay/limits", "-o", "json")
		var r lehrpb.Rollout
		return code == exitOK && parseJSON(out, &r) == nil && r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_ABORTED
	})
	c.ok("delete", "pay/limits")

	for _, fix := range suggested(t, c.fails("delete", "pay/rules"), "delete") {
		c.ok(fix...)
	}
	if out := c.ok("rollout", "list"); strings.Contains(out, "pay/") {
		t.Errorf("rollouts of the deleted namespaces are still listed:\n%s", out)
	}
}
