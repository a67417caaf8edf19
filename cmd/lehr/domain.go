package main

import (
	"context"
	"fmt"

	"lehr.dev/lehr/proto/lehrpb"
)

func runDomain(ctx context.Context, e *env, args []string) int {
	subs := []command{
		{"create", "create a domain", runDomainCreate},
		{"get", "show a domain", runDomainGet},
		{"list", "list domains", runDomainList},
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
	fmt.Fprint(w, `lehr domain — create, show and list domains

Usage: lehr domain create|get|list [ARGS] [FLAGS]

A domain is a tenant (a product, a team): it owns namespaces ("DOMAIN/NAME"),
carries quotas (namespace size, property count, publish rate) and lists who
may publish. Create a domain before publishing to its namespaces.

Subcommands:
  create NAME   create a domain, optionally with quotas and publishers
  get NAME      show a domain's quotas and publishers
  list          list every domain

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
0 take the server defaults (see docs/design.md, "Limits"). Publishers list the
identities allowed to publish; the list is recorded now and enforced once
authentication lands.`,
		examples: []string{
			"lehr domain create payments",
			`lehr domain create payments --description "payment service limits" --publisher alice --publisher ci`,
			"lehr domain create search --max-namespace-bytes 1048576 --publishes-per-second 2",
		},
	})
	cf := addClientFlags(fs, e)
	var d lehrpb.Domain
	q := &lehrpb.Quotas{}
	var pubs, readers stringList
	fs.StringVar(&d.Description, "description", "", "what the domain is for")
	fs.Int64Var(&q.MaxNamespaceBytes, "max-namespace-bytes", 0, "largest `bytes` of keys and values in one version of a namespace (0: server default)")
	fs.Int64Var(&q.MaxValueBytes, "max-value-bytes", 0, "largest value in `bytes` (0: server default)")
	maxProps := fs.Int("max-properties", 0, "most properties in one namespace (0: server default)")
	maxNS := fs.Int("max-namespaces", 0, "most namespaces in the domain (0: server default)")
	fs.Float64Var(&q.PublishesPerSecond, "publishes-per-second", 0, "sustained publish `rate` for the domain (0: server default)")
	burst := fs.Int("publish-burst", 0, "burst `size` for --publishes-per-second (0: server default)")
	fs.Var(&pubs, "publisher", "`identity` allowed to publish (repeatable)")
	fs.Var(&readers, "reader", "`identity` allowed to read (repeatable)")
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
	q.MaxProperties, q.MaxNamespaces, q.PublishBurst = int32(*maxProps), int32(*maxNS), int32(*burst)
	d.Name, d.Quotas = pos[0], q
	if len(pubs) > 0 || len(readers) > 0 {
		d.Acl = &lehrpb.Acl{Publishers: pubs, Readers: readers}
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
	fmt.Fprintf(e.stdout, "created domain %s\n", out.GetName())
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
