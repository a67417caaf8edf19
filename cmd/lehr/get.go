package main

import (
	"context"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

func runGet(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr get", doc{
		usage:   "lehr get NS [--version N] [--key K ...] [--raw] [flags]",
		summary: "show a version of a namespace (latest by default)",
		about: `Shows a version of namespace NS: its sequence number, checksum, author,
time, message and how it was made, then every key with its content type and
value. Text values are printed as they are; binary values, and text with
control characters (an escape sequence, a lone carriage return), as their
size and a hex preview; like every text output of lehr, the other fields
show control characters escaped (\x1b). --key restricts the output to some
keys (each must exist).
With exactly one --key, --raw prints only that value's bytes, for scripts.`,
		examples: []string{
			"lehr get demo/app",
			"lehr get demo/app --version 3 --key limits/rps",
			"lehr get demo/app --key features --raw | jq .",
		},
	})
	cf := addClientFlags(fs, e)
	version := fs.Uint64("version", 0, "read `version` N instead of the latest")
	var keys stringList
	fs.Var(&keys, "key", "show only `KEY` (repeatable)")
	raw := fs.Bool("raw", false, "print only the value of the single --key, unformatted")
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
	if *raw && len(keys) != 1 {
		return usageError(e, fs, "--raw needs exactly one --key")
	}
	ns := pos[0]
	var opts []producer.GetOption
	if *version != 0 {
		opts = append(opts, producer.AtVersion(*version))
	}
	if len(keys) > 0 {
		opts = append(opts, producer.Keys(keys...))
	}
	ec := cf.errCtx(ns)
	ec.lists = map[string][]string{"keys": keys}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, ec)
	}
	defer done()
	v, err := c.Get(ctx, ns, opts...)
	if err != nil {
		return reportError(e, fs.Name(), err, ec)
	}
	switch {
	case *raw:
		p, _ := v.Lookup(keys[0])
		if _, err := e.stdout.Write(p.Value); err != nil {
			return reportError(e, fs.Name(), err, ec)
		}
	case cf.json():
		return printOrFail(e, &lehrpb.GetResponse{Version: v.Info, Kind: v.Kind, Properties: content.ToProto(v.Properties)})
	default:
		writeVersion(e.stdout, v)
	}
	return exitOK
}
