package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every lehr command line that lehr prints or the project shows its users
// is one lehr accepts as printed: the examples of every command's help,
// the commands its errors and advice suggest (in this package and in the
// messages of control, the client libraries and the daemons that lehr
// relays), and the command lines of README.md, docs/ and the systemd
// units. Each runs through the dispatcher with env.checkOnly, which stops
// a command once its command line is checked, before it dials, listens or
// writes; placeholders (NS, NAME, N, %s, …) stand for sample values.
func TestPrintedCommandLinesWork(t *testing.T) {
	lines := map[string][]string{} // command line → where it was found
	add := func(where, line string) {
		for _, l := range expandCommandLine(line) {
			if !slices.Contains(lines[l], where) {
				lines[l] = append(lines[l], where)
			}
		}
	}
	// Inline code in documents names commands and flags in passing
	// ("`lehr get --raw`"): the command and each flag must exist.
	mentions := map[string][]string{}
	// The examples and quoted commands of every help.
	for _, path := range helpPaths() {
		code, stdout, stderr := runCLI(t, nil, append(path, "--help")...)
		if code != exitOK {
			t.Fatalf("lehr %s --help: exit %d\n%s", strings.Join(path, " "), code, stderr)
		}
		where := "lehr " + strings.Join(path, " ") + " --help"
		for _, l := range helpExamples(stdout) {
			add(where, l)
		}
		for _, l := range quotedCommands(stdout) {
			add(where, l)
		}
	}
	// The commands quoted in the messages of the code lehr runs or relays.
	root := filepath.Join("..", "..")
	for _, dir := range []string{"cmd", "control", "client", "agent", "distributor", "internal", "canary", "policy", "preview", "testenv/devtour", "testenv/devcluster"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || strings.HasSuffix(p, ".pb.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, l := range quotedCommands(string(b)) {
				add(p, l)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// README, docs and the systemd units.
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	units, _ := filepath.Glob(filepath.Join(root, "deploy", "*.service"))
	for _, p := range append(append([]string{filepath.Join(root, "README.md")}, docs...), units...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		blocks, inline := documentCommands(string(b))
		for _, l := range blocks {
			add(p, l)
		}
		for _, m := range inline {
			for _, l := range expandCommandLine(m) {
				mentions[l] = append(mentions[l], p)
			}
		}
	}
	for l, where := range mentions {
		if msg := checkMention(t, l); msg != "" {
			t.Errorf("%s\n  found in %s\n  %s", l, strings.Join(where, ", "), msg)
		}
	}
	if len(lines) < 150 {
		t.Fatalf("found only %d command lines; the collection is broken", len(lines))
	}
	for _, l := range slices.Sorted(func(yield func(string) bool) {
		for l := range lines {
			if !yield(l) {
				return
			}
		}
	}) {
		if msg := checkCommandLine(t, l); msg != "" {
			t.Errorf("%s\n  found in %s\n  %s", l, strings.Join(lines[l], ", "), strings.ReplaceAll(strings.TrimSpace(msg), "\n", "\n  "))
		}
	}
}

// helpPaths lists every command and subcommand that has a help of its own.
func helpPaths() [][]string {
	var out [][]string
	var walk func(path []string)
	walk = func(path []string) {
		out = append(out, path)
		for _, s := range subcommandNames(strings.Join(path, " ")) {
			walk(append(slices.Clone(path), s))
		}
	}
	for _, c := range commands() {
		walk([]string{c.name})
	}
	return out
}

// helpExamples returns the command lines under "Examples:" in a help.
func helpExamples(help string) []string {
	_, ex, ok := strings.Cut(help, "\nExamples:\n")
	if !ok {
		return nil
	}
	var out []string
	var cont string
	for _, l := range strings.Split(ex, "\n") {
		l = strings.TrimSpace(l)
		if cont != "" {
			l = cont + " " + l
			cont = ""
		}
		if c, ok := strings.CutSuffix(l, `\`); ok {
			cont = strings.TrimSpace(c)
			continue
		}
		if strings.HasPrefix(l, "lehr ") || strings.HasPrefix(l, "lehr-agent ") || strings.HasPrefix(l, "sudo lehr ") {
			out = append(out, l)
		}
	}
	return out
}

var quotedLehr = regexp.MustCompile(`'((?:sudo )?lehr [^'"]+)'`)

// quotedCommands returns the 'lehr …' commands quoted in text.
func quotedCommands(text string) []string {
	var out []string
	for _, m := range quotedLehr.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

var (
	fence     = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	unitExec  = regexp.MustCompile(`(?m)^ExecStart=\S*/(lehr(?:-agent)? .*(?:\\\n.*)*)`)
	inlineCmd = regexp.MustCompile("`((?:sudo )?lehr [^`]+)`")
)

// documentCommands returns the lehr command lines of a Markdown document
// (in code blocks) or a systemd unit (ExecStart), and apart the lehr
// commands named in its inline code.
func documentCommands(text string) (out, inline []string) {
	for _, m := range unitExec.FindAllStringSubmatch(text, -1) {
		out = append(out, joinContinued(m[1]))
	}
	for _, m := range fence.FindAllStringSubmatch(text, -1) {
		var cont string
		for _, l := range strings.Split(m[1], "\n") {
			l = strings.TrimSpace(l)
			if cont != "" {
				l, cont = cont+" "+l, ""
			}
			if c, ok := strings.CutSuffix(l, `\`); ok {
				cont = strings.TrimSpace(c)
				continue
			}
			l = strings.TrimPrefix(l, "$ ")
			if strings.HasPrefix(l, "lehr ") || strings.HasPrefix(l, "sudo lehr ") || strings.HasPrefix(l, "lehr-agent ") {
				out = append(out, l)
			}
		}
	}
	for _, m := range inlineCmd.FindAllStringSubmatch(text, -1) {
		inline = append(inline, m[1])
	}
	return out, inline
}

func joinContinued(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		parts = append(parts, strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l), `\`)))
	}
	return strings.Join(parts, " ")
}

// placeholders stand for values in printed command lines.
var placeholders = map[string]string{
	"NS": "demo/app", "NAMESPACE": "demo/app", "NAME": "demo", "DOMAIN": "demo", "SCOPE": "demo",
	"N": "3", "A": "1", "B": "2", "V": "3", "SIZE": "1GiB", "ZONE": "zone-a", "Z": "zone-a", "HOST": "web-1", "H": "web-1",
	"ID": "id1", "ADDR": "127.0.0.1:7400", "FILE": "f.json", "F": "f.json", "RULES": "rules.yaml", "PATH": "/tmp/lehr-check.sock",
	"DIR": "/tmp/lehr-check", "ETAG": "e1", "E": "e1", "P": "v1", "M": "why", "T": "24h", "D": "desc", "JSON": `{}`,
	"AUTHOR": "alice", "USER": "alice", "DURATION": "10s", "R": "0.3", "SCENARIO": "good", "COMMAND": "get",
	"--%s": "--publishers", "%s": "demo", "%d": "3", "%v": "3", "%q": "demo", "$(hostname)": "web-1", "unix://PATH": "unix:///tmp/lehr-check.sock",
}

var (
	optional    = regexp.MustCompile(`\s*\[[^\]]*\]`)
	alternative = regexp.MustCompile(`^[a-z-]+(\|[a-z-]+)+$`)
)

// expandCommandLine turns a printed line into the command lines it shows:
// comments, pipes and redirections cut, "&&" split, optional [parts]
// dropped, a|b|c alternatives expanded, placeholders substituted.
func expandCommandLine(line string) []string {
	var out []string
	for _, part := range strings.Split(line, "&&") {
		words := shellWords(optional.ReplaceAllString(part, ""))
		for len(words) > 0 && (words[0] == "sudo" || strings.Contains(words[0], "=")) {
			words = words[1:]
		}
		if len(words) < 2 || (words[0] != "lehr" && words[0] != "lehr-agent") {
			continue
		}
		variants := [][]string{nil}
		for i, w := range words {
			if w == "…" || w == "..." {
				// "--flag …": a value; "lehr push …": the rest of a
				// command, whose help shows it.
				if strings.HasPrefix(words[i-1], "-") {
					w = "x"
				} else {
					for j := range variants {
						variants[j] = append(variants[j], "--help")
					}
					break
				}
			}
			alts := []string{w}
			switch {
			case alternative.MatchString(w) && i > 0 && !strings.HasPrefix(words[i-1], "-"):
				alts = strings.Split(w, "|")
			default:
				alts = []string{substitute(w, words[:i])}
			}
			var next [][]string
			for _, v := range variants {
				for _, a := range alts {
					next = append(next, append(slices.Clone(v), a))
				}
			}
			variants = next
		}
		for _, v := range variants {
			out = append(out, strings.Join(quoteWords(v), " "))
		}
	}
	return out
}

// substitute replaces the placeholders of word w, given the words before
// it (a namespace or a domain for %s).
func substitute(w string, before []string) string {
	if w == "%s" || w == "%q" {
		for _, b := range before[1:] {
			switch b {
			case "get", "push", "patch", "history", "diff", "rollback", "delete", "rollout", "watch", "policy", "canary":
				if !slices.Contains(before, "domain") && !slices.Contains(before, "zones") {
					return "demo/app"
				}
			}
		}
		if slices.Contains(before, "--zone") || slices.Contains(before, "zones") {
			return "zone-a"
		}
	}
	if v, ok := placeholders[w]; ok {
		return v
	}
	w = strings.ReplaceAll(w, "…", "")
	for _, p := range []string{"ZONE/HOST", "%s/NAME", "ACCOUNT=USER"} {
		w = strings.ReplaceAll(w, p, map[string]string{"ZONE/HOST": "zone-a/web-1", "%s/NAME": "demo/app", "ACCOUNT=USER": "alice=alice"}[p])
	}
	w = strings.ReplaceAll(w, "%s", "demo")
	if k, v, ok := strings.Cut(w, "="); ok && !strings.HasPrefix(k, "-") {
		if r, ok := placeholders[v]; ok {
			return k + "=" + r
		}
	}
	return strings.TrimSuffix(strings.TrimSuffix(w, ","), ",")
}

// shellWords splits a command line as a shell would, roughly: quotes,
// backslash escapes, and a comment, a pipe or a redirection ends it.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case (r == '#' || r == '>' || r == '<' || r == ';') && !inWord:
			return out
		case r == '|' && !inWord:
			return out
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// quoteWords quotes the words a shell would split.
func quoteWords(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		if w == "" || strings.ContainsAny(w, " \t\"'{}$|&;<>*?") {
			w = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
		out[i] = w
	}
	return out
}

// checkCommandLine runs line (from expandCommandLine) through lehr with
// env.checkOnly and returns what is wrong with it, "" if nothing.
func checkCommandLine(t *testing.T, line string) string {
	t.Helper()
	words := shellWords(line)
	if words[0] == "lehr-agent" {
		words = append([]string{"lehr", "agent"}, words[1:]...)
	}
	args := words[1:]
	name := ""
	for i := 0; i < len(args); i++ { // the command, after any client flags
		if !strings.HasPrefix(args[i], "-") {
			name = args[i]
			break
		}
		if !strings.Contains(args[i], "=") {
			i++
		}
	}
	if len(args) == 1 && slices.Contains(clientFlagNames, strings.TrimLeft(args[0], "-")) {
		return "" // a client flag, named
	}
	if isCommandPath(args) {
		args = append(args, "--help") // a command, named
	}
	if name == "agent" || name == "distributor" {
		// Daemons shared with lean binaries: their flags are checked by
		// their packages' TestParse; here, that each flag exists.
		_, help, _ := runCLI(t, nil, name, "--help")
		for _, a := range args {
			if f, ok := strings.CutPrefix(a, "--"); ok && f != "help" {
				f, _, _ = strings.Cut(f, "=")
				if !strings.Contains(help, "--"+f+" ") && !strings.Contains(help, "--"+f+"\n") {
					return "lehr " + name + " has no flag --" + f
				}
			}
		}
		return ""
	}
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, checkOnly: true}
	code := run(context.Background(), args, e)
	switch {
	case code == exitOK:
		return ""
	case code == exitUsage && len(args) > 0 && args[len(args)-1] == "--help":
		return "" // the help, of a command without one of its own
	case strings.Contains(errb.String(), "no such file or directory") || code == exitError && strings.Contains(errb.String(), "standard input"):
		return "" // accepted; the test has not the file it reads
	}
	return "exit " + strconv.Itoa(code) + ":\n" + errb.String()
}

// isCommandPath reports whether args are a command and subcommands only.
func isCommandPath(args []string) bool {
	if len(args) == 0 || !slices.ContainsFunc(commands(), func(c command) bool { return c.name == args[0] }) {
		return false
	}
	for i := 1; i < len(args); i++ {
		if !slices.Contains(subcommandNames(strings.Join(args[:i], " ")), args[i]) {
			return false
		}
	}
	return true
}

// checkMention checks a command named in passing: its command path exists
// and has every flag it names.
func checkMention(t *testing.T, line string) string {
	t.Helper()
	args := shellWords(line)[1:]
	var path []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		if len(path) > 0 && !slices.Contains(subcommandNames(strings.Join(path, " ")), a) {
			break
		}
		path = append(path, a)
	}
	if len(path) == 0 {
		path = []string{"get"} // client flags alone
	}
	code, help, _ := runCLI(t, nil, append(path, "--help")...)
	if code != exitOK {
		return "no command lehr " + strings.Join(path, " ")
	}
	for _, a := range args {
		if f, ok := strings.CutPrefix(a, "-"); ok && f != "-help" {
			f, _, _ = strings.Cut(strings.TrimPrefix(f, "-"), "=")
			if !strings.Contains(help, "\n  "+flagName(f)+" ") && !strings.Contains(help, "\n  "+flagName(f)+"\n") {
				return "lehr " + strings.Join(path, " ") + " has no flag " + flagName(f)
			}
		}
	}
	return ""
}
