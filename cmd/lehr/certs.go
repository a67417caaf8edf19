package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
)

// Default validities of "lehr certs".
const (
	defaultCAValidity   = 10 * 365 * 24 * time.Hour
	defaultLeafValidity = 365 * 24 * time.Hour
)

// certsAbout explains which component needs which certificate; both
// subcommands' help and "lehr certs --help" print it.
const certsAbout = `Which component needs which certificate (all signed by the one CA; every
component trusts it with --tls-ca, or --client-ca for control). --role writes
the holder's Lehr identity into the certificate (a URI SAN such as
spiffe://lehr/host/zone-a/web-17), which decides what it may do
(docs/operations.md, "Security model"); --role sets --kind:

  control       --role control (server), with --host set to every name and
                address clients dial. Clients are verified when control runs
                with --client-ca CA.crt.
  distributor   --role distributor --zone Z (both: a server certificate for
                the agents' QUIC connections and a client certificate for its
                connection to control). It may serve only zone Z and call
                only the distribution methods of control. --host as for
                control.
  agent (host)  --role host --zone Z, with --name set to the host id: a
                distributor of zone Z accepts it as that host only (the
                announced --host-id must be the name); other zones, and
                control, refuse it.
  lehr CLI      --role user, when control requires client certificates: pass
                it with --tls-cert/--tls-key/--tls-ca; its name is recorded as
                the author of every change.

A certificate without --role has no Lehr identity: distributors and control
(with --client-ca) refuse it.`

func runCerts(ctx context.Context, e *env, args []string) int {
	subs := []command{
		{"init", "create a development CA", runCertsInit},
		{"issue", "issue a certificate signed by the CA", runCertsIssue},
	}
	if len(args) > 0 {
		for _, s := range subs {
			if s.name == args[0] {
				return s.run(ctx, e, args[1:])
			}
		}
	}
	w, code := e.stderr, exitUsage
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
		w, code = e.stdout, exitOK
	} else if len(args) > 0 {
		fmt.Fprintf(e.stderr, "lehr certs: unknown subcommand %q\n\n", args[0])
	}
	fmt.Fprintf(w, `lehr certs — make a development CA and component certificates

Usage: lehr certs init|issue [FLAGS]

Everything off loopback uses mutual TLS 1.3. "init" creates a certificate
authority (ca.crt, ca.key) in a directory; "issue" signs a certificate and its
key (NAME.crt, NAME.key) next to it. Keys are ECDSA P-256, written with mode
0600. Keep ca.key off the hosts; in production you may use your own CA with
the same properties instead.

%s

Subcommands:
  init    create a CA in --dir (kept if one is there already)
  issue   issue --name NAME --role host|distributor|user|control [--zone Z] [--host H ...]

Examples:
  lehr certs init --dir pki
  lehr certs issue --dir pki --name control --role control --host control.example.net
  lehr certs issue --dir pki --name dist-a1 --role distributor --zone zone-a --host dist-a1.example.net
  lehr certs issue --dir pki --name web-17 --role host --zone zone-a   # the agent on host web-17

Run 'lehr certs SUBCOMMAND --help' for flags.
`, certsAbout)
	return code
}

func runCertsInit(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr certs init", doc{
		usage:   "lehr certs init --dir DIR [--cn NAME] [--validity DURATION]",
		summary: "create a development CA",
		about: `Creates a certificate authority in DIR: ca.crt (give it to every component,
as --tls-ca or --client-ca) and ca.key (mode 0600; only "lehr certs issue"
needs it). DIR is created with mode 0700 if missing. If DIR holds a CA
already it is kept, not replaced, and the command says so.

` + certsAbout,
		examples: []string{
			"lehr certs init --dir pki",
			`lehr certs init --dir /etc/lehr/tls --cn "acme lehr CA" --validity 43800h`,
		},
	})
	dir := fs.String("dir", "", "`directory` of the CA (required)")
	cn := fs.String("cn", "lehr-dev-ca", "common `name` of the CA certificate")
	validity := fs.Duration("validity", defaultCAValidity, "how long the CA is valid (`duration`)")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 0, "no arguments"); !ok {
		return code
	}
	if *dir == "" {
		return usageError(e, fs, "missing --dir DIR")
	}
	if *validity <= 0 {
		return usageError(e, fs, "--validity %v: want a positive duration", *validity)
	}
	if e.checkOnly {
		return exitOK
	}
	_, err := os.Stat(filepath.Join(*dir, pki.CACertFile))
	existed := err == nil
	ca, err := pki.NewCA(*dir, *cn, *validity)
	if errors.Is(err, pki.ErrInvalid) && !existed {
		return usageError(e, fs, "%v", err)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "lehr certs init: %v\n", err)
		if errors.Is(err, pki.ErrIncompleteCA) {
			fmt.Fprintln(e.stderr, "  remove the leftover file, or restore the missing one, and run it again")
		}
		return exitError
	}
	verb := "created"
	if existed {
		verb = "kept the existing"
	}
	fmt.Fprintf(e.stdout, "%s CA %q in %s, valid until %s\n", verb, ca.Cert.Subject.CommonName, *dir,
		ca.Cert.NotAfter.UTC().Format("2006-01-02"))
	fmt.Fprintf(e.stdout, "  certificate  %s\n  key          %s (keep it private)\n",
		filepath.Join(*dir, pki.CACertFile), filepath.Join(*dir, pki.CAKeyFile))
	fmt.Fprintf(e.stdout, "next: lehr certs issue --dir %s --name NAME --kind server|client|both\n", *dir)
	return exitOK
}

func runCertsIssue(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr certs issue", doc{
		usage:   "lehr certs issue --dir DIR --name NAME --role host|distributor|user|control [--zone Z] [--host H ...] [flags]",
		summary: "issue a certificate signed by the CA",
		about: `Signs a certificate with the CA in DIR (see "lehr certs init") and writes
DIR/NAME.crt and DIR/NAME.key (mode 0600). NAME is the certificate's common
name — the identity the peer sees — and is 1-64 ASCII letters, digits, '.',
'_', '-' or '@'. Each --host becomes a subject alternative name (an IP
address or a DNS name) that clients check when they dial a server; with no
--host the certificate is valid for 127.0.0.1, ::1 and localhost. The
certificate never outlives the CA. An existing NAME.crt is not overwritten
unless --force is given.

` + certsAbout,
		examples: []string{
			"lehr certs issue --dir pki --name control --role control --host control.example.net --host 10.0.0.5",
			"lehr certs issue --dir pki --name dist-a1 --role distributor --zone zone-a --host dist-a1.example.net",
			"lehr certs issue --dir pki --name web-17 --role host --zone zone-a   # agent on host web-17",
			"lehr certs issue --dir pki --name alice --role user                  # an operator's lehr CLI",
		},
	})
	dir := fs.String("dir", "", "`directory` of the CA; the certificate is written there (required)")
	name := fs.String("name", "", "common `name`: the component's identity, and the file names (required)")
	kind := fs.String("kind", "", "what the certificate is for: `server`, client or both (set by --role)")
	role := fs.String("role", "", "the holder's Lehr `role`: host, distributor, user or control")
	zone := fs.String("zone", "", "with --role host or distributor: the holder's `zone`")
	var hosts stringList
	fs.Var(&hosts, "host", "DNS name or IP `address` the server is reached at (repeatable; default 127.0.0.1, ::1, localhost)")
	validity := fs.Duration("validity", defaultLeafValidity, "how long the certificate is valid (`duration`)")
	force := fs.Bool("force", false, "overwrite an existing NAME.crt and NAME.key")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 0, "no arguments"); !ok {
		return code
	}
	switch {
	case *dir == "":
		return usageError(e, fs, "missing --dir DIR")
	case *name == "":
		return usageError(e, fs, "missing --name NAME")
	case *kind == "" && *role == "":
		return usageError(e, fs, "missing --role: want host, distributor, user or control (or --kind for a certificate without a Lehr identity)")
	case *validity <= 0:
		return usageError(e, fs, "--validity %v: want a positive duration", *validity)
	case *name == "ca":
		return usageError(e, fs, "--name ca: the CA's own files are ca.crt and ca.key; pick another name")
	}
	var uri *url.URL
	if *role != "" {
		id := tlsconfig.Identity{Role: *role, Zone: *zone, Name: *name}
		if err := id.Check(); err != nil {
			return usageError(e, fs, "--role %s --zone %q --name %q: %v", *role, *zone, *name, err)
		}
		uri = id.URI()
		want := map[string]string{tlsconfig.RoleHost: "client", tlsconfig.RoleDistributor: "both", tlsconfig.RoleUser: "client", tlsconfig.RoleControl: "server"}[*role]
		if *kind != "" && *kind != want {
			return usageError(e, fs, "--kind %s contradicts --role %s, which is a %s certificate; leave --kind out", *kind, *role, want)
		}
		*kind = want
	} else if *zone != "" {
		return usageError(e, fs, "--zone goes with --role host or --role distributor")
	}
	var k pki.Kind
	switch *kind {
	case "server":
		k = pki.Server
	case "client":
		k = pki.Client
	case "both":
		k = pki.Both
	default:
		return usageError(e, fs, "--kind %q: want server, client or both", *kind)
	}
	if e.checkOnly {
		return exitOK
	}
	ca, err := pki.LoadCA(*dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "lehr certs issue: %v\n", err)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(e.stderr, "  create the CA first: lehr certs init --dir %s\n", *dir)
		}
		return exitError
	}
	if !*force {
		for _, ext := range []string{".crt", ".key"} {
			p := filepath.Join(*dir, *name+ext)
			if _, err := os.Stat(p); err == nil {
				fmt.Fprintf(e.stderr, "lehr certs issue: %s exists; pass --force to replace it (its holder must then reload)\n", p)
				return exitError
			}
		}
	}
	certFile, keyFile, err := ca.IssueURIFiles(*dir, *name, k, hosts, uri, *validity)
	if errors.Is(err, pki.ErrInvalid) {
		return usageError(e, fs, "%v", err)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "lehr certs issue: %v\n", err)
		return exitError
	}
	shown := []string(hosts)
	if len(shown) == 0 {
		shown = []string{"127.0.0.1", "::1", "localhost"}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "lehr certs issue: read back %s: %v\n", certFile, err)
		return exitError
	}
	fmt.Fprintf(e.stdout, "issued %s certificate %q for %s, valid until %s\n", k, *name, strings.Join(shown, ", "),
		pair.Leaf.NotAfter.UTC().Format("2006-01-02"))
	if uri != nil {
		fmt.Fprintf(e.stdout, "  identity     %s\n", uri)
	} else {
		fmt.Fprintf(e.stdout, "  identity     none (no --role): distributors and control refuse it as a Lehr component\n")
	}
	fmt.Fprintf(e.stdout, "  certificate  %s\n  key          %s\n  CA           %s\n",
		certFile, keyFile, filepath.Join(*dir, pki.CACertFile))
	return exitOK
}
