package main

import (
	"context"

	"lehr.dev/lehr/proto/lehrpb"
)

func runHistory(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr history", doc{
		usage:   "lehr history NS [--limit N] [flags]",
		summary: "list the versions of a namespace, newest first",
		about: `Lists the versions of namespace NS, newest first: sequence number, time,
author, how it was made (snapshot, patch of N, rollback to N), size, the start
of its checksum and its message. History is bounded by the control plane's
retention policy; versions that are some zone's goal are always kept.`,
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
