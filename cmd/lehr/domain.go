package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

func runDomain(ctx context.Context, e *env, args []string) int {
	subs := []command{
		{"create", "create a domain", runDomainCreate},
		{"get", "show a domain", runDomainGet},
		{"update", "change a domain's description, quotas or ACL", runDomainUpdate},
		{"list", "list domains", runDomainList},
		{"delete", "delete a domain", runDomainDelete},
	}
	if len(args) > 0 {
		for _, s := range subs {
			if s.name == args[0] {
				return s.run(ctx, e, args[1:])
			}
		}
	}
	w, code := e.stderr, exitUsage
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
		w, code = e.stdout, exitOK
	} else if len(args) > 0 {
		fmt.Fprintf(e.stderr, "lehr domain: unknown subcommand %q\n\n", args[0])
	}
	fmt.Fprint(w, `lehr domain — create, show, list and delete domains

Usage: lehr domain create|get|update|list|delete [ARGS] [FLAGS]

A domain is a tenant (a product, a team): it owns namespaces ("DOMAIN/NAME"),
carries quotas (namespace size, property count, publish rate) and an ACL of
who may publish, operate rollouts and experiments, and administer it.
Create a domain before publishing to its namespaces.

Subcommands:
  create NAME   create a domain, optionally with quotas and an ACL
  get NAME      show a domain's quotas and ACL
  update NAME   change a domain's description, quotas or ACL (its admins only)
  list          list every domain
  delete NAME   delete a domain; with --force its namespaces too (its admins only)

Run 'lehr domain SUBCOMMAND --help' for flags and examples.
`)
	return code
}

func runDomainCreate(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr domain create", doc{
		usage:   "lehr domain create NAME [flags]",
		summary: "create a domain",
		about: `Creates a domain: a tenant that owns namespaces named "NAME/...". A domain
name is 1-63 bytes of a-z, 0-9 and '-', starting with a letter. Quotas left at
0 take the server defaults (see docs/design.md, "Limits").

The ACL names users (the <name> of a client certificate's identity
spiffe://lehr/user/<name>, from 'lehr certs issue --role user …'): admins may do
everything and change the domain; publishers may publish, patch and roll
back; operators may run rollouts, canary evaluations and policy experiments.
Control enforces it for callers with such a certificate (docs/operations.md,
"Security model"). Created over mutual TLS without --admin, the domain's
admin is you; created without any admin (plaintext loopback, lehr dev) it
is open: every user may do everything until an admin is set.`,
		examples: []string{
			"lehr domain create payments",
			`lehr domain create payments --description "payment service limits" --admin alice --publisher ci --operator oncall`,
			"lehr domain create search --max-namespace-bytes 1048576 --publishes-per-second 2",
		},
	})
	cf := addClientFlags(fs, e)
	var d lehrpb.Domain
	var pubs, readers, operators, admins stringList
	fs.StringVar(&d.Description, "description", "", "what the domain is for")
	qf := addQuotaFlags(fs)
	fs.Var(&pubs, "publisher", "`user` allowed to publish, patch and roll back (repeatable)")
	fs.Var(&operators, "operator", "`user` allowed to run rollouts, canary evaluations and policy experiments (repeatable)")
	fs.Var(&admins, "admin", "`user` allowed to do everything and change the domain (repeatable)")
	fs.Var(&readers, "reader", "a zone, or zone/host, that may receive the domain's namespaces; none: every host (repeatable)")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 1, "domain NAME"); !ok {
		return code
	}
	if msg := cf.check(); msg != "" {
		return usageError(e, fs, "%s", msg)
	}
	if msg := qf.check(); msg != "" {
		return usageError(e, fs, "%s", msg)
	}
	q := &lehrpb.Quotas{}
	qf.apply(q, nil)
	d.Name, d.Quotas = pos[0], q
	if len(pubs) > 0 || len(readers) > 0 || len(operators) > 0 || len(admins) > 0 {
		d.Acl = &lehrpb.Acl{Publishers: pubs, Readers: readers, Operators: operators, Admins: admins}
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	out, err := c.CreateDomain(ctx, &d)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	if cf.json() {
		return printOrFail(e, out)
	}
	fmt.Fprintf(e.stdout, "created domain %s\n", clean(out.GetName()))
	writeDomain(e.stdout, out)
	return exitOK
}

func runDomainGet(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr domain get", doc{
		usage:    "lehr domain get NAME [flags]",
		summary:  "show a domain",
		about:    "Shows a domain's description, creator, quotas and publishers.",
		examples: []string{"lehr domain get payments", "lehr domain get payments -o json"},
	})
	cf := addClientFlags(fs, e)
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 1, "domain NAME"); !ok {
		return code
	}
	if msg := cf.check(); msg != "" {
		return usageError(e, fs, "%s", msg)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	out, err := c.GetDomain(ctx, pos[0])
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	if cf.json() {
		return printOrFail(e, out)
	}
	writeDomain(e.stdout, out)
	return exitOK
}

func runDomainList(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr domain list", doc{
		usage:    "lehr domain list [flags]",
		summary:  "list domains",
		about:    "Lists every domain with its creation time, creator and description.",
		examples: []string{"lehr domain list", "lehr domain list -o json | jq -r '.domains[].name'"},
	})
	cf := addClientFlags(fs, e)
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 0, "no arguments"); !ok {
		return code
	}
	if msg := cf.check(); msg != "" {
		return usageError(e, fs, "%s", msg)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	out, err := c.ListDomains(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	if cf.json() {
		return printOrFail(e, &lehrpb.ListDomainsResponse{Domains: out})
	}
	writeDomains(e.stdout, out)
	return exitOK
}

func runDomainUpdate(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr domain update", doc{
		usage:   "lehr domain update NAME [--description D] [--publishers U,…] [--operators U,…] [--admins U,…] [flags]",
		summary: "change a domain's description, quotas or ACL",
		about: `Changes what the flags given name and keeps the rest: each ACL flag replaces
its whole list with a comma-separated list of users ("" empties it); each quota
flag sets that quota (0: the server default). Only the domain's admins may (an
open domain, without admins: every user), and only a fleet admin may set a
quota above the server default (lehr domain get shows the quotas in force). An
empty admins list opens the domain to every user.`,
		examples: []string{
			"lehr domain update payments --publishers alice,ci",
			`lehr domain update payments --operators oncall --description "payment limits"`,
			`lehr domain update payments --admins alice,bob`,
			`lehr domain update payments --max-stored-bytes 512MiB --publishes-per-second 20`,
		},
	})
	cf := addClientFlags(fs, e)
	desc := fs.String("description", "", "what the domain is for")
	pubs := fs.String("publishers", "", "comma-separated `users` allowed to publish, patch and roll back")
	ops := fs.String("operators", "", "comma-separated `users` allowed to run rollouts, canary evaluations and policy experiments")
	admins := fs.String("admins", "", "comma-separated `users` allowed to do everything and change the domain")
	readers := fs.String("readers", "", "comma-separated `zones` or zone/host entries that may receive the domain's namespaces (\"\": every host)")
	qf := addQuotaFlags(fs)
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 1, "domain NAME"); !ok {
		return code
	}
	if msg := cf.check(); msg != "" {
		return usageError(e, fs, "%s", msg)
	}
	if msg := qf.check(); msg != "" {
		return usageError(e, fs, "%s", msg)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	quotas := slices.ContainsFunc(quotaFlagNames, func(n string) bool { return set[n] })
	if !set["description"] && !set["publishers"] && !set["operators"] && !set["admins"] && !set["readers"] && !quotas {
		return usageError(e, fs, "nothing to change: give --description, --publishers, --operators, --admins, --readers or a quota flag (--max-stored-bytes, --publishes-per-second, …)")
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	d := &lehrpb.Domain{Name: pos[0], Description: *desc}
	var paths []string
	if set["description"] {
		paths = append(paths, "description")
	}
	var cur *lehrpb.Domain
	if set["publishers"] || set["operators"] || set["admins"] || set["readers"] || quotas {
		// The ACL and the quotas are replaced whole: start from the
		// current ones.
		if cur, err = c.GetDomain(ctx, pos[0]); err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(""))
		}
	}
	if quotas {
		q := proto.CloneOf(cur.GetQuotas())
		if q == nil {
			q = &lehrpb.Quotas{}
		}
		qf.apply(q, set)
		d.Quotas = q
		paths = append(paths, "quotas")
	}
	if set["publishers"] || set["operators"] || set["admins"] || set["readers"] {
		acl := proto.CloneOf(cur.GetAcl())
		if acl == nil {
			acl = &lehrpb.Acl{}
		}
		for _, l := range []struct {
			flag string
			val  *string
			list *[]string
		}{{"publishers", pubs, &acl.Publishers}, {"operators", ops, &acl.Operators}, {"admins", admins, &acl.Admins}, {"readers", readers, &acl.Readers}} {
			if set[l.flag] {
				*l.list = splitList(*l.val)
			}
		}
		d.Acl = acl
		paths = append(paths, "acl")
	}
	out, err := c.UpdateDomain(ctx, d, paths...)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	if cf.json() {
		return printOrFail(e, out)
	}
	fmt.Fprintf(e.stdout, "updated domain %s\n", clean(out.GetName()))
	writeDomain(e.stdout, out)
	return exitOK
}

// splitList splits a comma-separated list, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
