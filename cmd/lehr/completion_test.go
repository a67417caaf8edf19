package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// completionScript writes "lehr completion SHELL" to a file and returns
// its path and text.
func completionScript(t *testing.T, shell string) (path, text string) {
	t.Helper()
	code, out, errOut := runCLI(t, nil, "completion", shell)
	if code != exitOK || errOut != "" {
		t.Fatalf("lehr completion %s: exit %d\n%s", shell, code, errOut)
	}
	path = filepath.Join(t.TempDir(), "lehr."+shell)
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, out
}

// Each script parses in its shell (when the shell is installed) and
// names every command, every subcommand and every flag lehr has.
func TestCompletionScriptsParse(t *testing.T) {
	nodes, _ := completionTree(t.Context(), &env{})
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			path, text := completionScript(t, shell)
			for _, n := range nodes {
				for _, w := range append(slices.Clone(n.subs), n.flags...) {
					if !regexp.MustCompile(`[\s"']` + regexp.QuoteMeta(w) + `[\s"']`).MatchString(text) {
						t.Errorf("the %s script lacks %q (of lehr %s)", shell, w, n.path)
					}
				}
			}
			check := map[string][]string{"bash": {"bash", "-n", path}, "zsh": {"zsh", "-n", path}, "fish": {"fish", "--no-execute", path}}[shell]
			if _, err := exec.LookPath(check[0]); err != nil {
				t.Skipf("%s is not installed: the script's syntax is not checked", shell)
			}
			if out, err := exec.Command(check[0], check[1:]...).CombinedOutput(); err != nil {
				t.Errorf("%s: %v\n%s", strings.Join(check, " "), err, out)
			}
		})
	}
	if got, _ := completionTree(t.Context(), &env{}); len(got) < 60 {
		t.Errorf("the completion tree has %d command paths; want every command and subcommand", len(got))
	}
	for _, c := range commands() {
		if !slices.ContainsFunc(nodes, func(n compNode) bool { return n.path == c.name }) {
			t.Errorf("no completion for lehr %s", c.name)
		}
	}
	nodeOf := func(path string) compNode {
		i := slices.IndexFunc(nodes, func(n compNode) bool { return n.path == path })
		if i < 0 {
			t.Fatalf("no completion node %q", path)
		}
		return nodes[i]
	}
	if n := nodeOf("rollout wait"); !slices.Contains(n.flags, "--version") || !slices.Contains(n.flags, "--timeout") || slices.Contains(n.flags, "--active") {
		t.Errorf("lehr rollout wait completes flags %v; want its own (--version, the client flags), not list's --active", n.flags)
	}
	if n := nodeOf("agent"); !slices.Contains(n.flags, "--distributors") {
		t.Errorf("lehr agent completes flags %v; want --distributors among them", n.flags)
	}
}

// What each shell completes, in the shell.
var completionCases = []struct {
	line string // the command line up to the cursor
	want []string
	not  []string
}{
	{line: "lehr ro", want: []string{"rollout", "rollback"}},
	{line: "lehr rollout po", want: []string{"policy"}},
	{line: "lehr rollout policy s", want: []string{"set"}, not: []string{"status"}},
	{line: "lehr rollout wait demo/app --ti", want: []string{"--timeout"}},
	{line: "lehr --control 127.0.0.1:7400 dom", want: []string{"domain"}},
	{line: "lehr --control domain ", want: nil, not: []string{"create"}}, // "domain" is --control's value
	{line: "lehr -o ", want: []string{"text", "json"}},
	{line: "lehr --t", want: []string{"--timeout", "--tls-ca", "--tls-cert", "--tls-key"}},
	{line: "lehr policy experiment c", want: []string{"create", "commit", "counts"}},
	{line: "lehr completion ", want: []string{"bash", "zsh", "fish"}},
	{line: "lehr help rol", want: []string{"rollout", "rollback"}},
}

// The bash script completes as it should.
func TestCompletionBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	path, _ := completionScript(t, "bash")
	for _, tc := range completionCases {
		words := strings.Fields(tc.line)
		if strings.HasSuffix(tc.line, " ") {
			words = append(words, "")
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		script := "source " + path + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "\n_lehr\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command("bash", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		checkCompletions(t, "bash", tc.line, strings.Fields(string(out)), tc.want, tc.not)
	}
}

// The fish script completes as it should (complete -C asks fish what it
// would offer).
func TestCompletionFish(t *testing.T) {
	if _, err := exec.LookPath("fish"); err != nil {
		t.Skip("fish is not installed")
	}
	path, _ := completionScript(t, "fish")
	for _, tc := range completionCases {
		cmd := exec.Command("fish", "--no-config", "-c", "source "+path+"; complete -C '"+tc.line+"'")
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f, _, _ := strings.Cut(l, "\t"); f != "" {
				got = append(got, f)
			}
		}
		checkCompletions(t, "fish", tc.line, got, tc.want, tc.not)
	}
}

func checkCompletions(t *testing.T, shell, line string, got, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s completes %q to %q; want %q among them", shell, line, got, w)
		}
	}
	for _, w := range not {
		if slices.Contains(got, w) {
			t.Errorf("%s completes %q to %q; want no %q", shell, line, got, w)
		}
	}
}
