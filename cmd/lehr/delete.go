package main

import (
	"context"
	"fmt"

	"lehr.dev/lehr/client/producer"
)

// deleteAbout is what every deletion command says of what hosts see.
const deleteAbout = `Hosts that hold a deleted namespace keep the version they have, and serve it
from disk: a running service's file is never taken away. Their distributors
drop its goal and tell them it is NOT_FOUND, which the agent passes on to the
consumers (consumer.Subscription.Unavailable, and a warning in their log). A
namespace published again under the name continues after the deleted one's
last version, never at 1, so no host mistakes the new versions for ones it
has (docs/operations.md, "Deleting namespaces and domains").`

func runDelete(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr delete", doc{
		usage:   "lehr delete NS [--force] [--etag vN] [--message M] [flags]",
		summary: "delete a namespace and its history",
		about: `Deletes namespace NS and everything of it, for good: every version and its
content, its goal in every zone, its rollouts, rollout policy and canary
evaluations and, for a policy, its experiments and preview namespace. Its
domain's stored bytes are credited back (lehr domain get, lehr store). Only
the domain's admins, and fleet admins, may; the deletion is audited with
--message (lehr audit). Nothing asks for confirmation.

lehr delete reads the namespace first and deletes what it read: a version
published in between refuses the deletion (ETAG_MISMATCH) and deletes
nothing. --etag vN deletes only if version N is still the latest. With -o
json it prints the namespace as it was deleted.

Without --force it is refused while hosts hold or subscribe to the namespace,
as their zones' distributors report (lehr zones status ZONE), and while a
rollout of it is running or paused (lehr rollout status NS).

` + deleteAbout,
		examples: []string{
			"lehr delete demo/app",
			`lehr delete payments/old-limits --etag v12 --message "replaced by payments/limits"`,
			"lehr delete demo/app --force -o json",
		},
	})
	cf := addClientFlags(fs, e)
	force := fs.Bool("force", false, "delete even while hosts subscribe to it or a rollout of it is in flight")
	etag := fs.String("etag", "", "delete only if the namespace's etag is still `vN` (its latest version is N)")
	message := fs.String("message", "", "why, for the audit log")
	fs.StringVar(message, "m", "", "short for --message")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 1, "namespace NS (DOMAIN/NAME)"); !ok {
		return code
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	ns := pos[0]
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	defer done()
	n, err := c.GetNamespace(ctx, ns)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	o := producer.DeleteOptions{Etag: *etag, Force: *force, Message: *message}
	if o.Etag == "" {
		o.Etag = n.GetEtag() // what was read, and nothing newer
	}
	if err := c.DeleteNamespace(ctx, ns, o); err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	if cf.json() {
		return printOrFail(e, n) // the namespace as it was deleted
	}
	what := "no version"
	if l := n.GetLatestVersion(); l > 0 {
		what = fmt.Sprintf("versions %d to %d, %s stored", n.GetOldestVersion(), l, fmtBytes(n.GetStoredBytes()))
	}
	fmt.Fprintf(e.stdout, "deleted %s (%s); published again, it starts at version %d\n", clean(ns), what, n.GetLatestVersion()+1)
	return exitOK
}

func runDomainDelete(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr domain delete", doc{
		usage:   "lehr domain delete NAME [--force] [--etag E] [--message M] [flags]",
		summary: "delete a domain (with --force, its namespaces too)",
		about: `Deletes domain NAME: its record, ACL, quotas, rollout policy and usage. A
domain that still has namespaces is refused, unless --force, which deletes
them with it (as lehr delete does each, whatever subscribes to them or rolls
out). Only the domain's admins, and fleet admins, may; the deletion is audited
with --message (lehr audit). Nothing asks for confirmation.

lehr domain delete reads the domain first and deletes what it read: a change
of the domain in between (lehr domain update) refuses the deletion
(ETAG_MISMATCH). --etag E deletes only if the domain's etag is still E (lehr
domain get NAME -o json). With -o json it prints the domain as it was deleted.

` + deleteAbout,
		examples: []string{
			"lehr domain delete sandbox",
			`lehr domain delete old-team --force --message "team dissolved"`,
		},
	})
	cf := addClientFlags(fs, e)
	force := fs.Bool("force", false, "delete the domain's namespaces with it")
	etag := fs.String("etag", "", "delete only if the domain's etag is still `E`")
	message := fs.String("message", "", "why, for the audit log")
	fs.StringVar(message, "m", "", "short for --message")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 1, "domain NAME"); !ok {
		return code
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	d, err := c.GetDomain(ctx, pos[0])
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	o := producer.DeleteOptions{Etag: *etag, Force: *force, Message: *message}
	if o.Etag == "" {
		o.Etag = d.GetEtag()
	}
	if err := c.DeleteDomain(ctx, pos[0], o); err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	if cf.json() {
		return printOrFail(e, d) // the domain as it was deleted
	}
	u := d.GetUsage()
	fmt.Fprintf(e.stdout, "deleted domain %s (%d %s, %s stored)\n", clean(d.GetName()), u.GetNamespaces(),
		plural(int(u.GetNamespaces()), "namespace", "namespaces"), fmtBytes(u.GetStoredBytes()))
	return exitOK
}
