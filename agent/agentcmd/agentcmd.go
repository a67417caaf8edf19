// Package agentcmd is the command line of the agent: flags → agent.Options
// → agent.New → Run until SIGINT or SIGTERM. The lean production binary
// cmd/lehr-agent and the "lehr agent" subcommand both call Main, so they
// are the same program with the same flags.
//
// Imported by cmd/lehr-agent and cmd/lehr.
package agentcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"lehr.dev/lehr/agent"
	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/internal/flaghelp"
	"lehr.dev/lehr/internal/gomemlimit"
	"lehr.dev/lehr/internal/logflags"
	"lehr.dev/lehr/internal/sdnotify"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/internal/wire"
)

// Usage is the help text printed above the flag list.
const Usage = `lehr-agent — the Lehr per-host agent

Keeps the namespaces local consumers subscribe to current: it dials a
distributor of its zone over QUIC (mutual TLS), caches every version in
Badger under --data-dir, writes one file per subscribed namespace
(DATA_DIR/files/<domain>/<name>.lehr, format in docs/files.md) and serves
consumers on a unix socket (lehr.v1.Agent, proto/lehr/v1/agent.proto).
It serves from its cache at once on start, before any distributor answers,
and fails over between the distributors listed.

Usage:
  lehr-agent --zone ZONE --distributors ADDR[,ADDR...] --tls-ca CA.crt --tls-cert HOST.crt --tls-key HOST.key [flags]

Examples:
  # A host in zone us-east-1a with two distributors (certificates from
  # "lehr certs issue"):
  lehr-agent --zone us-east-1a \
      --distributors dist-1.internal:7410,dist-2.internal:7410 \
      --tls-ca /etc/lehr/ca.crt --tls-cert /etc/lehr/host.crt --tls-key /etc/lehr/host.key

  # Local development, against a control and distributor started by hand as
  # in README.md ("Running the daemons by hand"), certificates in ./pki:
  lehr-agent --zone zone-a --distributors 127.0.0.1:7410 --host-id host-1 \
      --tls-ca pki/ca.crt --tls-cert pki/host-1.crt --tls-key pki/host-1.key \
      --data-dir /tmp/lehr-agent --metrics-listen 127.0.0.1:7421

  # Then, on the same host, watch a namespace arrive:
  lehr watch --socket /tmp/lehr-agent/agent.sock payments/limits

Flags:
`

// Main runs the agent with args (without the program name) and returns the
// process exit code: 0 after a clean shutdown (or --help, --version), 1 on
// failure, 2 on bad usage. Help and the build (--version) go to stderr,
// like the logs: a caller that wants them on standard output passes it
// when args ask for them. It stops on SIGINT or SIGTERM, or when ctx ends.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	opts, logOpts, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errVersion) {
		if err := buildinfo.Get().WriteText(stderr, "lehr-agent"); err != nil {
			return 1
		}
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "lehr-agent: %v\nRun lehr-agent --help for usage.\n", err)
		return 2
	}
	log, err := logOpts.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "lehr-agent: %v\n", err)
		return 2
	}
	opts.Logger = log
	gomemlimit.Apply(log)

	a, err := agent.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "lehr-agent: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = sdnotify.Serve(ctx, a, sdnotify.ServeOptions{
		Status: func() string { return "serving from cache" },
		Logger: log,
	})
	return exitErr(stderr, err)
}

func exitErr(stderr io.Writer, err error) int {
	if err != nil {
		fmt.Fprintf(stderr, "lehr-agent: %v\n", err)
		return 1
	}
	return 0
}

// errVersion is parse's answer to --version: print the build and exit.
var errVersion = errors.New("agentcmd: --version")

// parse turns the command line into agent options.
func parse(args []string, out io.Writer) (agent.Options, *logflags.Flags, error) {
	fs := flag.NewFlagSet("lehr-agent", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, Usage)
		flaghelp.Write(out, flaghelp.All(fs))
	}
	var (
		opts         agent.Options
		distributors = fs.String("distributors", "", "comma-separated UDP addresses (host:port) of the zone's distributors, in order of preference (required)")
		labels       = fs.String("labels", "", "host labels as key=value pairs separated by commas, e.g. role=canary,rack=r12")
		caFile       = fs.String("tls-ca", "", "PEM file of the CA that signs the distributors (required)")
		certFile     = fs.String("tls-cert", "", "PEM host certificate presented to distributors; its name is the host id (required)")
		keyFile      = fs.String("tls-key", "", "PEM private key of --tls-cert (required)")
		serverName   = fs.String("server-name", "", "name the distributors' certificates must carry; empty means the host part of each address")
		trusted      = fs.String("trusted-keys", "", "PEM file of control's signing public keys (control writes DATA-DIR/signing.pub): every version must be signed by one of them, or it is refused and the distributor that sent it dropped; empty accepts unsigned versions")
		group        = fs.String("consumer-group", "", "group (name or id) of the services that read this host's namespaces: the namespace files (0640), their directories and the socket (0660) are given to it; empty keeps the agent's own group")
	)
	fs.StringVar(&opts.Zone, "zone", "", "zone the host is in, e.g. us-east-1a (required)")
	fs.StringVar(&opts.DataDir, "data-dir", "/var/lib/lehr-agent", "directory of the cache (DATA_DIR/cache) and the namespace files (DATA_DIR/files)")
	fs.StringVar(&opts.Socket, "socket", "", "unix socket of the local API; empty means DATA_DIR/agent.sock")
	fs.StringVar(&opts.HostID, "host-id", "", "host identity announced to distributors; empty means the hostname")
	fs.StringVar(&opts.MetricsListen, "metrics-listen", "", "TCP address serving /metrics, e.g. 127.0.0.1:9411; empty serves none")
	fs.DurationVar(&opts.LeaseTTL, "lease-ttl", agent.DefaultLeaseTTL, "lease TTL granted to consumers that ask for the default")
	fs.DurationVar(&opts.UnsubscribeGrace, "grace", agent.DefaultUnsubscribeGrace, "how long a namespace stays subscribed (and its file kept) after its last lease ends")
	fs.DurationVar(&opts.CacheRetention, "cache-retention", agent.DefaultCacheRetention, "how long the cache keeps a namespace no consumer has wanted since (after the grace); a consumer asking within it is served at once; negative keeps it forever")
	fs.DurationVar(&opts.SilenceTimeout, "silence-timeout", wire.DefaultSilenceTimeout, "fail over to another distributor after hearing nothing from the connected one for this long (keepalives every third of it); 500ms to 1m. Lower fails over sooner, but more often on lossy links")
	fs.DurationVar(&opts.SignalsInterval, "signals-interval", 10*time.Second, "interval of the signals kept per namespace for canary analysis, and of scraping consumers' metrics endpoints; whole seconds")
	fs.DurationVar(&opts.BackoffMin, "backoff-min", agent.DefaultBackoffMin, "shortest wait between connection attempts")
	fs.BoolVar(&opts.NoSync, "no-sync", false, "skip the fsync of the cache and of every file before acknowledging an update (tests only: a machine crash may lose what was applied)")
	fs.DurationVar(&opts.BackoffMax, "backoff-max", agent.DefaultBackoffMax, "longest wait between connection attempts")
	version := fs.Bool("version", false, "print the agent's build (release version, commit, Go version) and exit")
	lo := logflags.Register(fs)
	if err := fs.Parse(args); err != nil {
		return opts, lo, err
	}
	if *version {
		return opts, lo, errVersion
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
	for _, d := range strings.Split(*distributors, ",") {
		if d = strings.TrimSpace(d); d != "" {
			if _, _, err := net.SplitHostPort(d); err != nil {
				return opts, lo, fmt.Errorf("--distributors: %q is not host:port", d)
			}
			opts.Distributors = append(opts.Distributors, d)
		}
	}
	if len(opts.Distributors) == 0 {
		return opts, lo, errors.New("--distributors is required: at least one host:port")
	}
	if *labels != "" {
		opts.Labels = map[string]string{}
		for _, kv := range strings.Split(*labels, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || k == "" {
				return opts, lo, fmt.Errorf("--labels: %q is not key=value", kv)
			}
			opts.Labels[k] = v
		}
	}
	if *group != "" {
		gid, err := lookupGroup(*group)
		if err != nil {
			return opts, lo, fmt.Errorf("--consumer-group: %w", err)
		}
		opts.ConsumerGid = gid
	}
	if *trusted != "" {
		v, err := signing.LoadVerifier(*trusted)
		if err != nil {
			return opts, lo, fmt.Errorf("--trusted-keys: %w", err)
		}
		opts.TrustedKeys = v
	}
	if *caFile == "" || *certFile == "" || *keyFile == "" {
		return opts, lo, errors.New("--tls-ca, --tls-cert and --tls-key are required: distributors only accept agents with a host certificate")
	}
	tc, err := tlsconfig.Client(*certFile, *keyFile, *caFile, *serverName)
	if err != nil {
		return opts, lo, err
	}
	opts.TLS = tc
	if opts.DataDir != "" {
		opts.DataDir = filepath.Clean(opts.DataDir)
	}
	return opts, lo, nil
}

// lookupGroup returns the id of a group given by name or number.
func lookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr != nil {
			return 0, fmt.Errorf("no group %q on this host: %w", name, err)
		}
		if g, err = user.LookupGroupId(name); err != nil {
			return 0, fmt.Errorf("no group with id %s on this host: %w", name, err)
		}
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, fmt.Errorf("group %q has id %q, not a number", name, g.Gid)
	}
	if gid == 0 {
		return 0, fmt.Errorf("group %q is the root group; name the consumers' group", name)
	}
	return gid, nil
}
