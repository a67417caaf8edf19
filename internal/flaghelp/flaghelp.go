// Package flaghelp writes the flags of a command as every Lehr command's
// help lists them, GNU style: "--name VALUE" ("-o VALUE" for a one-letter
// name), the usage indented on the next line, and the default when it is
// not the zero value. The flag package's own PrintDefaults writes "-name"
// instead, which no Lehr help shows, so "lehr", "lehr-agent" and the
// daemons read alike.
//
// Imported by cmd/lehr, agent/agentcmd and distributor/distributorcmd; it
// imports nothing of ours.
package flaghelp

import (
	"flag"
	"fmt"
	"io"
)

// Name returns the flag name as help writes it: "--name", or "-o" for a
// one-letter name.
func Name(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// All returns fs's flags in name order.
func All(fs *flag.FlagSet) []*flag.Flag {
	var out []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f) })
	return out
}

// Write prints flags, each as "  --name VALUE" and its usage below,
// indented, followed by its default unless that is the zero value. VALUE
// is the usage's `quoted` word, or the flag type's (flag.UnquoteUsage).
func Write(w io.Writer, flags []*flag.Flag) {
	for _, f := range flags {
		arg, usage := flag.UnquoteUsage(f)
		line := "  " + Name(f.Name)
		if arg != "" {
			line += " " + arg
		}
		switch f.DefValue {
		case "", "0", "false", "[]":
		default:
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, usage)
	}
}
