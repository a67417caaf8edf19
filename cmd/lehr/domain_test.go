package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
)

// "lehr domain update" changes what its flags name and keeps the rest of
// the ACL; bad input is refused with the field and changes nothing.
func TestDomainUpdate(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay", "--publisher", "ci", "--operator", "oncall")
	out := c.ok("domain", "update", "pay", "--admins", "alice,bob", "--description", "payment limits")
	mustContain(t, "update output", out, "updated domain pay", "admins              alice, bob", "publishers          ci", "operators           oncall", "payment limits")
	c.ok("domain", "update", "pay", "--publishers", "")
	var d struct {
		Description string `json:"description"`
		Acl         struct {
			Publishers []string `json:"publishers"`
			Operators  []string `json:"operators"`
			Admins     []string `json:"admins"`
		} `json:"acl"`
	}
	if err := json.Unmarshal([]byte(c.ok("domain", "get", "pay", "-o", "json")), &d); err != nil {
		t.Fatal(err)
	}
	if d.Description != "payment limits" || len(d.Acl.Publishers) != 0 || !slices.Equal(d.Acl.Operators, []string{"oncall"}) || !slices.Equal(d.Acl.Admins, []string{"alice", "bob"}) {
		t.Errorf("domain after updates: %+v", d)
	}
	errOut := c.fails("domain", "update", "pay", "--admins", "not a name")
	mustContain(t, "bad admin", errOut, "domain.acl.admins[0]", "not a user name")
	if code, _, errOut := c.run("", "domain", "update", "pay"); code != exitUsage {
		t.Errorf("update without a change: exit %d, want %d (usage)\n%s", code, exitUsage, errOut)
	} else {
		mustContain(t, "nothing to change", errOut, "nothing to change")
	}
}

// TestQuotaErrorFixesWork runs, as a user would, the fixes a refusal for a
// domain's stored-bytes quota suggests: 'lehr history compact' frees it,
// and 'lehr domain update --max-stored-bytes' raises it; lehr domain get
// shows the usage against the quota throughout.
func TestQuotaErrorFixesWork(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay", "--max-stored-bytes", "1MiB")
	big := func(n int) string { return fmt.Sprintf(`{"blob": %q}`, strings.Repeat(fmt.Sprint(n%10), 300<<10)) }
	var refusal string
	for i := range 5 {
		code, _, errOut := c.run(big(i), "push", "pay/rules", "--file", "-")
		if code != exitOK {
			refusal = errOut
			break
		}
	}
	mustContain(t, "refused push", refusal, "QUOTA_EXCEEDED", "domain pay stores", "of its 1.0 MiB quota",
		"lehr history compact NAMESPACE --keep N", "lehr domain update pay --max-stored-bytes SIZE")
	mustContain(t, "domain get when full", c.ok("domain", "get", "pay"), "stored", "of 1.0 MiB", "max stored bytes    1.0 MiB")

	// The first fix: compact the history.
	mustContain(t, "history compact", c.ok("history", "compact", "pay/rules", "--keep", "1"), "removed", "version(s) of pay/rules")
	if code, _, errOut := c.run(big(7), "push", "pay/rules", "--file", "-"); code != exitOK {
		t.Fatalf("push after 'lehr history compact': exit %d\n%s", code, errOut)
	}
	// The second: raise the quota (within the server's default, which the
	// domain's admin may; beyond it a fleet admin).
	c.ok("domain", "update", "pay", "--max-stored-bytes", "4MiB")
	for i := range 3 {
		if code, _, errOut := c.run(big(i), "push", "pay/rules", "--file", "-"); code != exitOK {
			t.Fatalf("push %d after raising the quota: exit %d\n%s", i, code, errOut)
		}
	}
	mustContain(t, "domain get after", c.ok("domain", "get", "pay"), "of 4.0 MiB", "max stored bytes    4.0 MiB")
}
