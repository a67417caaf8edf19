package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
)

func runCompletion(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr completion", doc{
		usage:   "lehr completion bash|zsh|fish",
		summary: "print a shell completion script",
		about: `Prints a script that completes lehr's commands, subcommands and flags in
bash, zsh or fish (-o completes text and json; the values of other flags, and
arguments, complete as file names). It is made from lehr's own command table
and helps, so it completes what this lehr has.

  bash   source <(lehr completion bash), e.g. in ~/.bashrc; or save it as
         /etc/bash_completion.d/lehr
  zsh    source <(lehr completion zsh) after compinit, e.g. in ~/.zshrc; or
         save it as _lehr in a directory of $fpath
  fish   lehr completion fish | source; or save it as
         ~/.config/fish/completions/lehr.fish`,
		examples: []string{
			"source <(lehr completion bash)",
			"lehr completion zsh > \"${fpath[1]}/_lehr\"",
			"lehr completion fish > ~/.config/fish/completions/lehr.fish",
		},
	})
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 1, "a shell: bash, zsh or fish"); !ok {
		return code
	}
	write, ok := map[string]func(io.Writer, []compNode, []string){
		"bash": writeBashCompletion, "zsh": writeZshCompletion, "fish": writeFishCompletion,
	}[pos[0]]
	if !ok {
		return usageError(e, fs, "unknown shell %q: want bash, zsh or fish", pos[0])
	}
	nodes, valued := completionTree(ctx, e)
	write(e.stdout, nodes, valued)
	return exitOK
}

// compNode is one command path of lehr ("" for lehr itself, "rollout
// policy"): the words that may follow it and its flags.
type compNode struct {
	path  string
	subs  []string
	flags []string
}

// helpFlag matches a flag line of a help: "  --name VALUE" or "  -o VALUE".
var helpFlag = regexp.MustCompile(`(?m)^  (--?[a-z][a-z0-9-]*)( \S+)?$`)

// completionTree reads every command path from the command table and the
// subcommands, and its flags from its help (every lehr help lists its
// flags one way, internal/flaghelp); valued are the flags that take a
// value, whose next word is not a subcommand.
func completionTree(ctx context.Context, e *env) (nodes []compNode, valued []string) {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	var clientFlags []string
	for _, f := range clientFlagNames {
		clientFlags = append(clientFlags, flagName(f))
	}
	valuedSet := map[string]bool{}
	for _, f := range clientFlags {
		valuedSet[f] = true
	}
	nodes = append(nodes, compNode{path: "", subs: names, flags: append(slices.Clone(clientFlags), "--help")})
	var walk func(path []string)
	walk = func(path []string) {
		p := strings.Join(path, " ")
		n := compNode{path: p, subs: subcommandNames(p)}
		switch p {
		case "help":
			n.subs = names
		case "completion":
			n.subs = []string{"bash", "zsh", "fish"}
		}
		var out bytes.Buffer
		he := &env{stdin: strings.NewReader(""), stdout: &out, stderr: io.Discard, getenv: func(string) string { return "" }}
		if p != "help" {
			run(ctx, append(slices.Clone(path), "--help"), he)
		}
		for _, m := range helpFlag.FindAllStringSubmatch(out.String(), -1) {
			if !slices.Contains(n.flags, m[1]) {
				n.flags = append(n.flags, m[1])
			}
			if m[2] != "" {
				valuedSet[m[1]] = true
			}
		}
		sort.Strings(n.flags)
		n.flags = append(n.flags, "--help")
		nodes = append(nodes, n)
		for _, s := range subcommandNames(p) {
			walk(append(slices.Clone(path), s))
		}
	}
	for _, name := range names {
		walk([]string{name})
	}
	for f := range valuedSet {
		valued = append(valued, f)
	}
	sort.Strings(valued)
	return nodes, valued
}

// shCase writes a sh case statement on $1 that prints, for each node,
// what words returns, separated by spaces.
func shCase(w io.Writer, fn string, nodes []compNode, words func(compNode) []string) {
	fmt.Fprintf(w, "%s() {\n  case \"$1\" in\n", fn)
	for _, n := range nodes {
		if ws := words(n); len(ws) > 0 {
			fmt.Fprintf(w, "    %q) printf '%%s\\n' %q ;;\n", n.path, strings.Join(ws, " "))
		}
	}
	fmt.Fprintf(w, "  esac\n}\n\n")
}

func subsOf(n compNode) []string  { return n.subs }
func flagsOf(n compNode) []string { return n.flags }

func writeBashCompletion(w io.Writer, nodes []compNode, valued []string) {
	fmt.Fprint(w, `# bash completion for lehr, made by 'lehr completion bash'.
# Load it with: source <(lehr completion bash)

`)
	shCase(w, "_lehr_subcommands", nodes, subsOf)
	shCase(w, "_lehr_flags", nodes, flagsOf)
	fmt.Fprintf(w, `_lehr_takes_value() {
  case "$1" in
    %s) return 0 ;;
  esac
  return 1
}

_lehr() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  local cmdpath="" word subs i skip=0
  COMPREPLY=()
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    if ((skip)); then skip=0; continue; fi
    if [[ $word == -* ]]; then
      [[ $word != *=* ]] && _lehr_takes_value "$word" && skip=1
      continue
    fi
    subs=" $(_lehr_subcommands "$cmdpath") "
    [[ $subs == *" $word "* ]] && cmdpath=${cmdpath:+$cmdpath }$word
  done
  if ((COMP_CWORD > 1)) && _lehr_takes_value "$prev"; then
    [[ $prev == -o ]] && COMPREPLY=($(compgen -W "text json" -- "$cur"))
    return 0
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(_lehr_flags "$cmdpath")" -- "$cur"))
    return 0
  fi
  subs=$(_lehr_subcommands "$cmdpath")
  [[ -n $subs ]] && COMPREPLY=($(compgen -W "$subs" -- "$cur"))
  return 0
}

complete -o default -F _lehr lehr
`, strings.Join(valued, "|"))
}

func writeZshCompletion(w io.Writer, nodes []compNode, valued []string) {
	fmt.Fprint(w, `#compdef lehr
# zsh completion for lehr, made by 'lehr completion zsh'.
# Load it with: source <(lehr completion zsh) after compinit, or save it as
# _lehr in a directory of $fpath.

`)
	shCase(w, "_lehr_subcommands", nodes, subsOf)
	shCase(w, "_lehr_flags", nodes, flagsOf)
	fmt.Fprintf(w, `_lehr_takes_value() {
  case "$1" in
    %s) return 0 ;;
  esac
  return 1
}

_lehr() {
  local cmdpath="" word i skip=0
  local -a subs
  for ((i = 2; i < CURRENT; i++)); do
    word=${words[i]}
    if ((skip)); then skip=0; continue; fi
    if [[ $word == -* ]]; then
      [[ $word != *=* ]] && _lehr_takes_value "$word" && skip=1
      continue
    fi
    subs=(${=$(_lehr_subcommands "$cmdpath")})
    ((${subs[(Ie)$word]})) && cmdpath=${cmdpath:+$cmdpath }$word
  done
  if ((CURRENT > 2)) && _lehr_takes_value "${words[CURRENT-1]}"; then
    if [[ ${words[CURRENT-1]} == -o ]]; then
      compadd -- text json
    else
      _files
    fi
    return
  fi
  if [[ $PREFIX == -* ]]; then
    compadd -- ${=$(_lehr_flags "$cmdpath")}
    return
  fi
  subs=(${=$(_lehr_subcommands "$cmdpath")})
  if (($#subs)); then
    compadd -- $subs
  else
    _files
  fi
}

if [[ $funcstack[1] == _lehr ]]; then
  _lehr "$@"
else
  compdef _lehr lehr
fi
`, strings.Join(valued, "|"))
}

func writeFishCompletion(w io.Writer, nodes []compNode, valued []string) {
	fmt.Fprint(w, `# fish completion for lehr, made by 'lehr completion fish'.
# Load it with: lehr completion fish | source, or save it as
# ~/.config/fish/completions/lehr.fish.

`)
	for _, fn := range []struct {
		name  string
		words func(compNode) []string
	}{{"__lehr_subcommands", subsOf}, {"__lehr_flags", flagsOf}} {
		fmt.Fprintf(w, "function %s\n    switch \"$argv[1]\"\n", fn.name)
		for _, n := range nodes {
			if ws := fn.words(n); len(ws) > 0 {
				fmt.Fprintf(w, "        case %s\n            printf '%%s\\n' %s\n", fishQuote(n.path), strings.Join(ws, " "))
			}
		}
		fmt.Fprintf(w, "    end\nend\n\n")
	}
	fmt.Fprintf(w, `function __lehr_takes_value
    contains -- $argv[1] %s
end

function __lehr_path
    set -l cmdpath ''
    set -l skip 0
    for word in (commandline -opc)[2..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        if string match -q -- '-*' $word
            if not string match -q -- '*=*' $word; and __lehr_takes_value $word
                set skip 1
            end
            continue
        end
        if contains -- $word (__lehr_subcommands $cmdpath)
            if test -z "$cmdpath"
                set cmdpath $word
            else
                set cmdpath "$cmdpath $word"
            end
        end
    end
    echo $cmdpath
end

function __lehr_complete
    set -l words (commandline -opc)
    set -l tok (commandline -ct)
    if test (count $words) -gt 1; and __lehr_takes_value $words[-1]
        if test "$words[-1]" = -o
            printf '%%s\n' text json
        else
            __fish_complete_path $tok
        end
        return
    end
    set -l cmdpath (__lehr_path)
    if string match -q -- '-*' $tok
        __lehr_flags $cmdpath
        return
    end
    set -l subs (__lehr_subcommands $cmdpath)
    if test (count $subs) -gt 0
        printf '%%s\n' $subs
    else
        __fish_complete_path $tok
    end
end

complete -c lehr -f -a '(__lehr_complete)'
`, strings.Join(valued, " "))
}

// fishQuote quotes s for a fish case pattern (” for the empty path).
func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
}
