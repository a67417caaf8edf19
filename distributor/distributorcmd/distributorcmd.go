// Package distributorcmd is the command line of the distributor: flags →
// distributor.Options → distributor.New → Run until SIGINT or SIGTERM, with
// systemd readiness notifications. "lehr distributor" calls Main, and so
// will a lean distributor binary, so both have the same flags.
//
// Imported by cmd/lehr (and a future cmd/lehr-distributor).
package distributorcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"lehr.dev/lehr/internal/gomemlimit"
	"net"
	"os"
	"os/signal"
	"syscall"

	"lehr.dev/lehr/distributor"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/internal/controladdr"
	"lehr.dev/lehr/internal/flaghelp"
	"lehr.dev/lehr/internal/logflags"
	"lehr.dev/lehr/internal/sdnotify"
	"lehr.dev/lehr/internal/tlsconfig"
)

// Usage is the help text printed above the flag list.
const Usage = `lehr distributor — the Lehr zonal distributor

Watches the goal states of one zone on control, keeps the versions the
zone's agents need in memory (--cache-bytes; goal versions are never
evicted) and pushes every change to the agents subscribed to it over QUIC
(UDP --listen), as a patch when the agent holds a recent version and as a
snapshot otherwise. Every --report-interval it reports to control how many
agents hold which version (see "lehr zones status ZONE"). If control is
unreachable it keeps serving what it holds, to old and new agents alike.

Certificates (see "lehr certs --help"): agents connect with mutual TLS, so
--tls-cert/--tls-key is the distributor's server certificate and --tls-ca
the CA that signs the agents' host certificates. The distributor is also a
client of control: by default it presents the same certificate there (issue
it with --kind both) and verifies control against the same CA; the
--control-tls-* flags override each of the three. --control-plaintext talks
to a plaintext control instead, which is allowed on loopback only (as with
"lehr control" or "lehr dev" on one machine).

Usage:
  lehr distributor --zone ZONE --control ADDR --listen ADDR --tls-cert F --tls-key F --tls-ca F [flags]

Examples:
  # Production: zone us-east-1a, certificates from "lehr certs issue --kind both":
  lehr distributor --zone us-east-1a --control control.internal:7400 \
      --listen 0.0.0.0:7410 --metrics-listen 127.0.0.1:7411 \
      --tls-cert /etc/lehr/tls/distributor.crt --tls-key /etc/lehr/tls/distributor.key \
      --tls-ca /etc/lehr/tls/ca.crt

  # On one machine, next to a plaintext "lehr control":
  lehr distributor --zone zone-a --control 127.0.0.1:7400 --control-plaintext \
      --listen 127.0.0.1:7410 \
      --tls-cert pki/dist-a.crt --tls-key pki/dist-a.key --tls-ca pki/ca.crt

Flags:
`

// Main runs the distributor with args (without the program name) and
// returns the process exit code: 0 after a clean shutdown, 1 on failure, 2
// on bad usage. It stops on SIGINT or SIGTERM, or when ctx ends. Help and
// usage errors go to stderr; so do the logs.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	opts, lo, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "lehr distributor: %v\nRun 'lehr distributor --help' for usage.\n", err)
		return 2
	}
	log, err := lo.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "lehr distributor: %v\n", err)
		return 2
	}
	opts.Logger = log
	gomemlimit.Apply(log)

	d, err := distributor.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "lehr distributor: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = sdnotify.Serve(ctx, d, sdnotify.ServeOptions{
		Status: func() string { return fmt.Sprintf("serving zone %s on %s", opts.Zone, d.Addr()) },
		Logger: log,
	})
	return exitErr(stderr, err)
}

func exitErr(stderr io.Writer, err error) int {
	if err != nil {
		fmt.Fprintf(stderr, "lehr distributor: %v\n", err)
		return 1
	}
	return 0
}

// parse turns the command line into distributor options. It loads the
// certificates, so a missing or mismatched file is a usage error here
// rather than a failure at the first connection.
func parse(args []string, out io.Writer) (distributor.Options, *logflags.Flags, error) {
	fs := flag.NewFlagSet("lehr distributor", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, Usage)
		flaghelp.Write(out, flaghelp.All(fs))
	}
	var (
		opts distributor.Options

		certFile = fs.String("tls-cert", "", "PEM server certificate presented to agents (required)")
		keyFile  = fs.String("tls-key", "", "PEM private key of --tls-cert (required)")
		caFile   = fs.String("tls-ca", "", "PEM file of the CA that signs agents' host certificates, and by default control's (required)")

		ctlCert       = fs.String("control-tls-cert", "", "PEM client certificate presented to control; empty means --tls-cert")
		ctlKey        = fs.String("control-tls-key", "", "PEM private key of --control-tls-cert; empty means --tls-key")
		ctlCA         = fs.String("control-tls-ca", "", "PEM file of the CA that signs control's certificate; empty means --tls-ca")
		ctlServerName = fs.String("control-server-name", "", "name control's certificate must carry; empty means the host part of each --control entry")
		ctlPlaintext  = fs.Bool("control-plaintext", false, "talk to control without TLS (loopback addresses only)")
	)
	fs.StringVar(&opts.Zone, "zone", "", "zone served, e.g. us-east-1a (required)")
	fs.StringVar(&opts.ID, "id", "", "instance id shown to control and agents; empty means the id of the client certificate for control (spiffe://lehr/distributor/ZONE/ID), which control requires, or HOSTNAME-PID without one")
	fs.StringVar(&opts.ControlAddr, "control", "", "control's gRPC `address`: host:port, or a comma-separated list of them, one per control replica, to fail over between (required)")
	fs.StringVar(&opts.Listen, "listen", distributor.DefaultListen, "UDP address (host:port) agents dial over QUIC")
	fs.StringVar(&opts.MetricsListen, "metrics-listen", "", "TCP address serving /metrics, e.g. 127.0.0.1:7411; empty serves none")
	fs.BoolVar(&opts.Pprof, "pprof", false, "also serve Go's runtime profiles (net/http/pprof) under /debug/pprof/ on --metrics-listen, e.g. go tool pprof http://ADDR/debug/pprof/profile?seconds=10; unauthenticated, for a trusted network")
	fs.Int64Var(&opts.CacheBytes, "cache-bytes", distributor.DefaultCacheBytes, "bound in bytes on the version content kept in memory (goal versions go last; one evicted is fetched again from control when an agent needs it)")
	fs.DurationVar(&opts.ReportInterval, "report-interval", distributor.DefaultReportInterval, "how often to report convergence to control and ask agents for reports (at most 1m: a report stays valid at control for three intervals, at most 2m)")
	fs.BoolVar(&opts.GSO, "quic-gso", false, "let quic-go batch a connection's packets into one system call (UDP GSO): fewer system calls for large snapshots, but a pooled 20 KiB send buffer per connection with something to send, about 9 KiB more per agent at 10,000 agents (docs/operations.md); QUIC_GO_DISABLE_GSO in the environment, when set, decides instead")
	fs.Float64Var(&opts.RedialRate, "redial-rate", fanout.DefaultRedialRate, "agents per second this distributor can admit after a restart: agents spread their redials over (connected agents / this rate) seconds instead of all coming back at once; measure it on your hardware (docs/operations.md); negative: no spread")
	fs.Float64Var(&opts.KeepaliveRate, "keepalive-rate", fanout.DefaultKeepaliveRate, "keepalives per second this distributor budgets for its idle agents: each agent is told to send one every (connected agents / this rate) seconds, from its own interval (a third of its --silence-timeout) up to 10s, and its silence timeout grows to three of them, so a crash of a large distributor is noticed later (docs/operations.md, \"Keepalives\"); negative: agents keep their own")
	lo := logflags.Register(fs)
	if err := fs.Parse(args); err != nil {
		return opts, lo, err
	}
	if fs.NArg() > 0 {
		return opts, lo, fmt.Errorf("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}
	if err := lo.Validate(); err != nil {
		return opts, lo, err
	}
	if opts.Zone == "" {
		return opts, lo, errors.New("--zone is required")
	}
	if opts.ControlAddr == "" {
		return opts, lo, errors.New("--control is required: control's host:port (or a comma-separated list, one per control replica)")
	}
	if _, err := controladdr.Parse(opts.ControlAddr); err != nil {
		return opts, lo, fmt.Errorf("--control: %w", err)
	}
	if _, _, err := net.SplitHostPort(opts.Listen); err != nil {
		return opts, lo, fmt.Errorf("--listen %q: want host:port", opts.Listen)
	}
	if opts.Pprof && opts.MetricsListen == "" {
		return opts, lo, errors.New("--pprof serves on --metrics-listen: set it too")
	}
	if opts.CacheBytes <= 0 {
		return opts, lo, fmt.Errorf("--cache-bytes %d: want a positive number of bytes", opts.CacheBytes)
	}
	if opts.ReportInterval <= 0 || opts.ReportInterval > distributor.MaxReportInterval {
		return opts, lo, fmt.Errorf("--report-interval %v: want a positive duration of at most %v", opts.ReportInterval, distributor.MaxReportInterval)
	}
	if *certFile == "" || *keyFile == "" || *caFile == "" {
		return opts, lo, errors.New("--tls-cert, --tls-key and --tls-ca are required: agents connect with mutual TLS")
	}
	var err error
	opts.TLS, err = tlsconfig.Server(*certFile, *keyFile, *caFile)
	if err != nil {
		return opts, lo, fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err)
	}
	if *ctlPlaintext {
		if *ctlCert != "" || *ctlKey != "" || *ctlCA != "" || *ctlServerName != "" {
			return opts, lo, errors.New("--control-plaintext excludes the --control-tls-* and --control-server-name flags")
		}
		// distributor.New refuses plaintext off loopback, with a clear error.
		return opts, lo, nil
	}
	orDefault := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	// An empty server name verifies each replica against the name it is
	// listed under in --control.
	opts.ControlTLS, err = tlsconfig.Client(orDefault(*ctlCert, *certFile), orDefault(*ctlKey, *keyFile), orDefault(*ctlCA, *caFile), *ctlServerName)
	if err != nil {
		return opts, lo, fmt.Errorf("TLS to control (--control-tls-*): %w", err)
	}
	return opts, lo, nil
}
