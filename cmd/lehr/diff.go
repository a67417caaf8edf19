package main

import (
	"context"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

func runDiff(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr diff", doc{
		usage:   "lehr diff NS A B [flags]",
		summary: "show what changed between two versions",
		about: `Compares versions A and B of namespace NS key by key: "+" marks a key added in
B, "-" a key removed, "~" a key whose value or content type changed, with the
old and new values. A may be newer than B (the diff then shows how to go back).`,
		examples: []string{
			"lehr diff demo/app 1 2",
			"lehr diff payments/limits 40 43 -o json",
		},
	})
	cf := addClientFlags(fs, e)
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 3, "namespace NS and versions A B"); !ok {
		return code
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	ns := pos[0]
	a, err := parseVersion("version A", pos[1])
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	b, err := parseVersion("version B", pos[2])
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	defer done()
	d, err := c.Diff(ctx, ns, a, b)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	if cf.json() {
		return printOrFail(e, diffProto(d))
	}
	writeDiff(e.stdout, d)
	return exitOK
}

// diffProto converts a diff back to its wire form for -o json.
func diffProto(d *producer.Diff) *lehrpb.DiffResponse {
	return &lehrpb.DiffResponse{From: d.From, To: d.To, Changes: content.ChangesToProto(d.Changes)}
}
