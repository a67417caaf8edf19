package main

import (
	"context"
	"fmt"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
)

func runRollback(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr rollback", doc{
		usage:   "lehr rollback NS --to N [flags]",
		summary: "publish an older version's content as a new version",
		about: `Publishes the content of version N of namespace NS as a new version (history
is never rewritten: the rollback is itself a version, recorded with its
author and message). Every zone's goal moves to it. Version N must still be in
history; see 'lehr history NS'.`,
		examples: []string{
			`lehr rollback demo/app --to 1 --message "back out the rps change"`,
			`lehr rollback payments/limits --to 41 --expect-version 43 --as oncall`,
		},
	})
	cf := addClientFlags(fs, e)
	to := fs.Uint64("to", 0, "the `version` whose content to republish (required)")
	msg := fs.String("message", "", "why: recorded in history")
	fs.StringVar(msg, "m", "", "short for --message")
	expect := fs.Uint64("expect-version", 0, "roll back only if the latest version is still `N`")
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
	if *to == 0 {
		return usageError(e, fs, "missing --to N: the version to roll back to (see 'lehr history %s')", ns)
	}
	var opts []producer.PublishOption
	if *msg != "" {
		opts = append(opts, producer.WithMessage(*msg))
	}
	if *expect != 0 {
		opts = append(opts, producer.WithExpectedVersion(*expect))
	}
	ec := cf.errCtx(ns)
	ec.write = "rollback"
	ec.conflictHint = func(latest uint64) string {
		return fmt.Sprintf("check `lehr history %s` and retry with --expect-version %d", ns, latest)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, ec)
	}
	defer done()
	v, err := c.Rollback(ctx, ns, *to, opts...)
	if err != nil {
		return reportError(e, fs.Name(), err, ec)
	}
	if cf.json() {
		return printOrFail(e, &lehrpb.RollbackResponse{Version: v})
	}
	writeCommitted(e.stdout, "rolled back", v)
	return exitOK
}
