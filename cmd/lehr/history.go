package main

import (
	"context"
	"fmt"

	"lehr.dev/lehr/proto/lehrpb"
)

func runHistory(ctx context.Context, e *env, args []string) int {
	if len(args) > 0 && args[0] == "compact" { // a namespace has a "/"
		return runHistoryCompact(ctx, e, args[1:])
	}
	fs := newFlags("lehr history", doc{
		usage:   "lehr history NS [--limit N] [flags]\n       lehr history compact NS --keep N [flags]",
		summary: "list the versions of a namespace, newest first",
		about: `Lists the versions of namespace NS, newest first: sequence number, time,
author, how it was made (snapshot, patch of N, rollback to N), size, the start
of its checksum and its message. History is bounded by the control plane's
retention policy; versions that are some zone's goal are always kept.

Subcommands:
  compact   remove old versions now ('lehr history compact --help')`,
		examples: []string{
			"lehr history demo/app",
			"lehr history demo/app --limit 100",
			"lehr history demo/app -o json | jq '.versions[0].seq'",
		},
	})
	cf := addClientFlags(fs, e)
	limit := fs.Int("limit", 20, "show at most `N` versions (0: all)")
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
	if *limit < 0 {
		return usageError(e, fs, "--limit %d: want 0 (all) or more", *limit)
	}
	ns := pos[0]
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	defer done()
	var versions []*lehrpb.VersionInfo
	for v, err := range c.History(ctx, ns) {
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(ns))
		}
		versions = append(versions, v)
		if *limit > 0 && len(versions) == *limit {
			break
		}
	}
	if cf.json() {
		return printOrFail(e, &lehrpb.HistoryResponse{Versions: versions})
	}
	writeHistory(e.stdout, versions)
	return exitOK
}

func runHistoryCompact(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr history compact", doc{
		usage:   "lehr history compact NS --keep N [--message M] [flags]",
		summary: "remove a namespace's old versions now, to free its domain's stored bytes",
		about: `Removes every version of namespace NS but the newest N, whatever their age,
and the content only they referenced, then prints what the namespace and its
domain store now. The latest version is never removed, nor a version some
zone's goal names (a rollout's base or candidate). Control gives the space
back to the store by itself right after.

A domain's versions count against its stored-bytes quota (lehr domain get);
when a publish is refused with QUOTA_EXCEEDED or STORE_FULL, this is how a
domain frees room without waiting for the retention policy. Only the
domain's admins may; the call is audited with --message.`,
		examples: []string{
			"lehr history compact demo/app --keep 10",
			`lehr history compact payments/rules --keep 1 --message "free space after the 8 MiB snapshots"`,
		},
	})
	cf := addClientFlags(fs, e)
	keep := fs.Int("keep", 0, "keep the newest `N` versions (1 or more)")
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
	if *keep < 1 {
		return usageError(e, fs, "--keep %d: give how many of the newest versions to keep, 1 or more (the latest is always kept)", *keep)
	}
	ns := pos[0]
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	defer done()
	removed, after, err := c.CompactNamespace(ctx, ns, *keep, *message)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	if cf.json() {
		return printOrFail(e, &lehrpb.CompactNamespaceResponse{VersionsRemoved: int32(removed), Namespace: after})
	}
	fmt.Fprintf(e.stdout, "removed %d version(s) of %s: it keeps versions %d to %d and stores %s\n",
		removed, ns, after.GetOldestVersion(), after.GetLatestVersion(), fmtBytes(after.GetStoredBytes()))
	return exitOK
}
