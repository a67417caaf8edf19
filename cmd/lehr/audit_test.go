package main

import (
	"encoding/json"
	"strings"
	"testing"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
)

// Every mutating call lands in the audit log with who, what, the target,
// the version and the result — refused calls too — and "lehr audit"
// filters it by domain (issue 12, audit).
func TestAuditLog(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay")
	c.ok("domain", "create", "ops")
	if code, out, errOut := c.run(`{"a": 1}`, "push", "pay/limits", "--file", "-", "--message", "first"); code != exitOK {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	c.fails("patch", "pay/limits", "--base", "7", "--set", "a=2") // stale base: refused, still recorded
	if code, out, errOut := c.run(`{"b": 1}`, "push", "ops/x", "--file", "-"); code != exitOK {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	c.ok("get", "pay/limits") // a read: not recorded

	out := c.ok("audit", "--domain", "pay")
	mustContain(t, "audit of pay", out, "tester", "CreateDomain", "Publish       pay/limits  1", "first", "Patch", "FAILED_PRECONDITION")
	if strings.Contains(out, "ops/x") || strings.Contains(out, "GetVersion") || strings.Contains(out, "Get ") {
		t.Errorf("audit --domain pay shows another domain's records or a read:\n%s", out)
	}
	var got struct {
		Records []struct {
			Author  string `json:"author"`
			Method  string `json:"method"`
			Target  string `json:"target"`
			Domain  string `json:"domain"`
			Version uint64 `json:"version"`
			Code    string `json:"code"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(c.ok("audit", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, r := range got.Records {
		methods = append(methods, r.Method+" "+r.Target+" "+r.Code)
		if r.Author != "tester" {
			t.Errorf("record %+v: author %q, want tester", r, r.Author)
		}
	}
	want := []string{"CreateDomain pay OK", "CreateDomain ops OK", "Publish pay/limits OK", "Patch pay/limits FAILED_PRECONDITION", "Publish ops/x OK"}
	if strings.Join(methods, "; ") != strings.Join(want, "; ") {
		t.Errorf("audit records:\n%s\nwant\n%s", strings.Join(methods, "\n"), strings.Join(want, "\n"))
	}
	if len(got.Records) > 2 && (got.Records[2].Version != 1 || got.Records[2].Domain != "pay") {
		t.Errorf("the publish's record %+v; want version 1 of domain pay", got.Records[2])
	}
	mustContain(t, "since", c.ok("audit", "--since", "1h", "--limit", "1"), "CreateDomain")
	if out := c.ok("audit", "--since", "2099-01-01T00:00:00Z"); !strings.Contains(out, "no audit records") {
		t.Errorf("audit in the future:\n%s", out)
	}
}
