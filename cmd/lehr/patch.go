package main

import (
	"context"
	"fmt"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
)

func runPatch(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr patch", doc{
		usage:   "lehr patch NS --base N [--set K=V] [--set-json K=JSON] [--set-file K=@PATH] [--delete K] [flags]",
		summary: "set and delete keys against a base version",
		about: `Changes some keys of namespace NS and stores the result as a new version.
--base names the version the change was written against; if someone published
since, the patch is refused with the latest version number (never merged
silently): look at what changed with 'lehr diff', then retry with the new base.

--set K=V stores V as text (text/plain). --set-json K=JSON stores compact JSON
(application/json; the value must parse). --set-file K=@PATH stores a file's
bytes, typed by extension (.json, .yaml, .yml) or as text/plain when UTF-8,
application/octet-stream otherwise. --delete K removes a key, which must exist.
Each flag may be repeated; each key may appear once.`,
		examples: []string{
			`lehr patch demo/app --base 1 --set-json limits/rps=250 --message "more headroom"`,
			`lehr patch demo/app --base 2 --set greeting=hi --delete features/old`,
			`lehr patch payments/rules --base 9 --set-file fraud.json=@./fraud.json`,
		},
	})
	cf := addClientFlags(fs, e)
	var pf patchFlags
	base := fs.Uint64("base", 0, "the `version` the change is based on (required; see 'lehr get NS')")
	msg := fs.String("message", "", "why: recorded in history")
	fs.StringVar(msg, "m", "", "short for --message")
	fs.Var(&pf.set, "set", "set key to a text value: `KEY=VALUE` (repeatable)")
	fs.Var(&pf.setJSON, "set-json", "set key to a JSON value: `KEY=JSON` (repeatable)")
	fs.Var(&pf.setFile, "set-file", "set key to a file's content: `KEY=@PATH` (repeatable)")
	fs.Var(&pf.del, "delete", "remove `KEY` (repeatable)")
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
	if *base == 0 {
		return usageError(e, fs, "missing --base N: the version your change is based on (see 'lehr get %s')", ns)
	}
	p, err := pf.build()
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	var opts []producer.PublishOption
	if *msg != "" {
		opts = append(opts, producer.WithMessage(*msg))
	}
	ec := cf.errCtx(ns)
	ec.write = "patch"
	ec.lists = map[string][]string{"set": keysOf(p.Set), "delete": p.Delete}
	ec.conflictHint = func(latest uint64) string {
		return fmt.Sprintf("re-read with `lehr get %s` and retry with --base %d", ns, latest)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, ec)
	}
	defer done()
	v, err := c.Patch(ctx, ns, *base, p, opts...)
	if err != nil {
		return reportError(e, fs.Name(), err, ec)
	}
	if cf.json() {
		return printOrFail(e, &lehrpb.PatchResponse{Version: v})
	}
	writeCommitted(e.stdout, "patched", v)
	return exitOK
}
