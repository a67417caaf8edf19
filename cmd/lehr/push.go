package main

import (
	"context"
	"fmt"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/proto/lehrpb"
)

func runPush(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr push", doc{
		usage:   "lehr push NS --file FILE [flags]",
		summary: "publish a namespace snapshot from a JSON or YAML file",
		about: `Publishes the complete content of namespace NS ("DOMAIN/NAME") as a new
immutable version: keys absent from the file are removed. The namespace is
created on its first push if its domain exists. Every zone's goal moves to the
new version. To change a few keys against a known version, use 'lehr patch'.

` + fileFormatHelp + `

--expect-version N publishes only if N is still the latest version, so two
people pushing at once cannot silently overwrite each other.`,
		examples: []string{
			`lehr push demo/app --file app.json --message "first cut"`,
			`lehr push payments/limits --file limits.yaml --expect-version 7 --as alice`,
			`echo '{"motd": "maintenance at 18:00"}' | lehr push demo/banner --file -`,
		},
	})
	cf := addClientFlags(fs, e)
	file := fs.String("file", "", "JSON or YAML `file` with the new content; - reads standard input")
	msg := fs.String("message", "", "why: recorded in history")
	fs.StringVar(msg, "m", "", "short for --message")
	kind := fs.String("kind", "", "namespace `kind` when the push creates it: config (default) or policy")
	expect := fs.Uint64("expect-version", 0, "publish only if the latest version is still `N`")
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
	if *file == "" {
		return usageError(e, fs, "missing --file FILE (use --file - for standard input)")
	}
	var opts []producer.PublishOption
	switch *kind {
	case "":
	case "config":
		opts = append(opts, producer.WithKind(lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG))
	case "policy":
		opts = append(opts, producer.WithKind(lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY))
	default:
		return usageError(e, fs, "--kind %q: want config or policy", *kind)
	}
	if *msg != "" {
		opts = append(opts, producer.WithMessage(*msg))
	}
	if *expect != 0 {
		opts = append(opts, producer.WithExpectedVersion(*expect))
	}
	ns := pos[0]
	props, err := readPropertiesFile(*file, e.stdin)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", fs.Name(), err)
		return exitError
	}
	ec := cf.errCtx(ns)
	ec.write = "publish"
	ec.lists = map[string][]string{"properties": keysOf(props)}
	ec.conflictHint = func(latest uint64) string {
		return fmt.Sprintf("re-read with `lehr get %s` and retry with --expect-version %d", ns, latest)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, ec)
	}
	defer done()
	v, err := c.Publish(ctx, ns, props, opts...)
	if err != nil {
		return reportError(e, fs.Name(), err, ec)
	}
	if cf.json() {
		return printOrFail(e, &lehrpb.PublishResponse{Version: v})
	}
	writeCommitted(e.stdout, "published", v)
	return exitOK
}

func keysOf(props []producer.Property) []string {
	keys := make([]string, len(props))
	for i, p := range props {
		keys[i] = p.Key
	}
	return keys
}
