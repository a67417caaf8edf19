package main

import (
	"encoding/json"
	"slices"
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
