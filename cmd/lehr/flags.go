package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/flaghelp"
	"lehr.dev/lehr/proto/lehrpb"
)

// doc is the help text of one command.
type doc struct {
	usage    string   // "lehr push NS --file FILE [flags]"
	summary  string   // one line
	about    string   // a paragraph or two
	examples []string // command lines, each with an optional "# comment"
	// subs are the helps of the subcommands of a command whose
	// subcommands share its flag set ("lehr rollout wait"), groups of
	// them ("lehr rollout policy") too. parse finds the one the
	// arguments name: its --help is that subcommand's, its usage errors
	// name it, and it refuses the flags of other subcommands.
	subs []subDoc
}

// subDoc is the help of a subcommand that shares its command's flag set.
type subDoc struct {
	path string // the words after the command: "wait", "policy set"
	doc
	// flags are the command's own flags the subcommand takes (the client
	// flags go without saying); a group of subcommands takes none.
	flags []string
}

// flags is a command's FlagSet with its help text.
type flags struct {
	*flag.FlagSet
	doc doc
	// sub is the subcommand of doc.subs the arguments name, once parse
	// found it.
	sub *subDoc
}

// Name is the command's name, with the subcommand the arguments name:
// "lehr rollout wait".
func (fs *flags) Name() string {
	if fs.sub != nil {
		return fs.FlagSet.Name() + " " + fs.sub.path
	}
	return fs.FlagSet.Name()
}

// findSub returns the subcommand of fs that pos names (the longest path
// pos starts with), nil if none.
func (fs *flags) findSub(pos []string) *subDoc {
	var best *subDoc
	for i := range fs.doc.subs {
		s := &fs.doc.subs[i]
		words := strings.Fields(s.path)
		if len(words) <= len(pos) && slices.Equal(words, pos[:len(words)]) && (best == nil || len(s.path) > len(best.path)) {
			best = s
		}
	}
	return best
}

// children returns the subcommands right below path ("" for the
// command's own).
func (d *doc) children(path string) []subDoc {
	var out []subDoc
	for _, s := range d.subs {
		parent, _, _ := cutLast(s.path)
		if parent == path {
			out = append(out, s)
		}
	}
	return out
}

// cutLast splits "policy set" into "policy" and "set"; "wait" into "" and
// "wait".
func cutLast(path string) (parent, last string, ok bool) {
	i := strings.LastIndexByte(path, ' ')
	if i < 0 {
		return "", path, false
	}
	return path[:i], path[i+1:], true
}

// newFlags returns the flags of a command whose --help prints d.
func newFlags(name string, d doc) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flags{FlagSet: fs, doc: d}
}

// printHelp writes the full help of fs: of the subcommand the arguments
// name, if any. A command or group whose subcommands have helps of their
// own lists them, and its client flags; each subcommand lists the flags
// it takes.
func printHelp(w io.Writer, fs *flags) {
	d, path := fs.doc, ""
	if fs.sub != nil {
		d, path = fs.sub.doc, fs.sub.path
	}
	fmt.Fprintf(w, "%s — %s\n\nUsage: %s\n\n", fs.Name(), d.summary, d.usage)
	fmt.Fprintln(w, strings.TrimSpace(d.about))
	children := fs.doc.children(path)
	if len(children) > 0 {
		fmt.Fprintln(w, "\nSubcommands:")
		tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
		for _, c := range children {
			_, last, _ := cutLast(c.path)
			fmt.Fprintf(tw, "  %s\t%s\n", last, c.summary)
		}
		tw.Flush()
	}
	var own, client []*flag.Flag
	isClient := fs.Lookup("control") != nil // a command that talks to control
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case isClient && slices.Contains(clientFlagNames, f.Name):
			client = append(client, f)
		case fs.sub != nil && !slices.Contains(fs.sub.flags, f.Name):
		case fs.sub == nil && len(fs.doc.subs) > 0:
			// Each subcommand lists its own.
		default:
			own = append(own, f)
		}
	})
	writeFlags(w, "Flags", own)
	writeFlags(w, "Client flags", client)
	if len(d.examples) > 0 {
		fmt.Fprintln(w, "\nExamples:")
		for _, ex := range d.examples {
			fmt.Fprintf(w, "  %s\n", ex)
		}
	}
	if len(children) > 0 {
		fmt.Fprintf(w, "\nRun '%s SUBCOMMAND --help' for a subcommand's flags and examples.\n", fs.Name())
	}
}

// clientFlagNames are the flags addClientFlags defines, in the order lehr's
// help lists them. They may come before the command too (run).
var clientFlagNames = []string{"control", "as", "o", "timeout", "tls-ca", "tls-cert", "tls-key"}

// writeFlags prints a group of flags, GNU style: "--name VALUE", with the
// usage below and the default when it is not the zero value.
func writeFlags(w io.Writer, title string, fl []*flag.Flag) {
	if len(fl) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	flaghelp.Write(w, fl)
}

// parse parses args with flags and positional arguments in any order ("--"
// ends flags). It handles --help and usage errors itself: ok is false when
// the command should return code at once.
func parse(e *env, fs *flags, args []string) (pos []string, code int, ok bool) {
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.sub = fs.findSub(pos)
			printHelp(e.stdout, fs)
			return nil, exitOK, false
		}
		if err != nil {
			fs.sub = fs.findSub(append(pos, fs.Args()...))
			return nil, usageError(e, fs, "%v", err), false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(fs.doc.subs) == 0 {
		return pos, exitOK, true
	}
	fs.sub = fs.findSub(pos)
	if fs.sub == nil || len(fs.doc.children(fs.sub.path)) > 0 {
		return pos, exitOK, true // the command reports a missing or unknown subcommand
	}
	var stray []string
	fs.Visit(func(f *flag.Flag) {
		if !slices.Contains(fs.sub.flags, f.Name) && !slices.Contains(clientFlagNames, f.Name) {
			stray = append(stray, flaghelp.Name(f.Name))
		}
	})
	if len(stray) > 0 {
		return nil, usageError(e, fs, "%s %s not a flag of %s", strings.Join(stray, ", "), plural(len(stray), "is", "are"), fs.Name()), false
	}
	return pos, exitOK, true
}

// usageError reports a command-line mistake and returns exitUsage.
func usageError(e *env, fs *flags, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	usage := fs.doc.usage
	if fs.sub != nil {
		usage = fs.sub.usage
	}
	if usage != "" {
		fmt.Fprintf(e.stderr, "Usage: %s\n", usage)
	}
	fmt.Fprintf(e.stderr, "Run '%s --help' for flags and examples.\n", fs.Name())
	return exitUsage
}

// wantArgs checks the number of positional arguments.
func wantArgs(e *env, fs *flags, pos []string, n int, what string) (int, bool) {
	if len(pos) != n {
		if len(pos) < n {
			return usageError(e, fs, "missing %s", what), false
		}
		return usageError(e, fs, "unexpected argument %q (want %s)", pos[n], what), false
	}
	return exitOK, true
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// clientFlags are the flags of every command that talks to control.
type clientFlags struct {
	control string
	as      string
	output  string
	tlsCert string
	tlsKey  string
	tlsCA   string
	timeout time.Duration
	// checkOnly: dial fails with errCheckOnly (env.checkOnly).
	checkOnly bool
}

// errCheckOnly is what dial returns under env.checkOnly: reportError
// returns exitOK for it, silently.
var errCheckOnly = errors.New("lehr: command line checked; not dialling (env.checkOnly)")

func addClientFlags(fs *flags, e *env) *clientFlags {
	cf := &clientFlags{checkOnly: e.checkOnly}
	def := e.env("LEHR_CONTROL")
	if def == "" {
		def = producer.DefaultAddress
	}
	fs.StringVar(&cf.control, "control", def, "control plane `address`: host:port, a comma-separated list of them (one per control replica: calls go to any that is up), or unix:///path (env LEHR_CONTROL)")
	fs.StringVar(&cf.as, "as", e.env("LEHR_AS"), "`author` to assert, honoured only by a control in dev mode that cannot tell who you are; one that can (client certificate, --socket) records your identity and refuses any other --as (env LEHR_AS)")
	fs.StringVar(&cf.output, "o", "text", "output `format`: text (control characters of stored data escaped, as \\x1b), or json (for scripts: the API's field names, numbers as numbers, each value as its content type says; docs/cli.md)")
	fs.StringVar(&cf.tlsCA, "tls-ca", "", "CA certificate `file` to verify control with (enables TLS)")
	fs.StringVar(&cf.tlsCert, "tls-cert", "", "client certificate `file` for mutual TLS (with --tls-key)")
	fs.StringVar(&cf.tlsKey, "tls-key", "", "client private key `file` for mutual TLS")
	fs.DurationVar(&cf.timeout, "timeout", 30*time.Second, "give up after this `duration`")
	return cf
}

// check validates the client flags; it returns a usage message or "".
func (cf *clientFlags) check() string {
	switch cf.output {
	case "text", "json":
	default:
		return fmt.Sprintf("-o %q: want text or json", cf.output)
	}
	if (cf.tlsCert == "") != (cf.tlsKey == "") {
		return "--tls-cert and --tls-key go together"
	}
	if cf.timeout <= 0 {
		return fmt.Sprintf("--timeout %v: want a positive duration", cf.timeout)
	}
	return ""
}

func (cf *clientFlags) json() bool { return cf.output == "json" }

// tlsConfig builds the TLS configuration, or nil for plaintext.
func (cf *clientFlags) tlsConfig() (*tls.Config, error) {
	if cf.tlsCA == "" && cf.tlsCert == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cf.tlsCA != "" {
		pem, err := os.ReadFile(cf.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("read --tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificates found", cf.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if cf.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(cf.tlsCert, cf.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("load --tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// dial returns a producer client configured by the flags.
func (cf *clientFlags) dial() (*producer.Client, error) {
	if cf.checkOnly {
		return nil, errCheckOnly
	}
	tc, err := cf.tlsConfig()
	if err != nil {
		return nil, err
	}
	return producer.New(producer.Options{
		Address: cf.control,
		TLS:     tc,
		Author:  cf.as,
		Logger:  slog.New(slog.DiscardHandler),
	})
}

// connect dials control and bounds ctx by --timeout. The caller defers done,
// which cancels the context and closes the client.
func (cf *clientFlags) connect(ctx context.Context) (c *producer.Client, callCtx context.Context, done func(), err error) {
	c, err = cf.dial()
	if err != nil {
		return nil, nil, nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, cf.timeout)
	return c, callCtx, func() { cancel(); c.Close() }, nil
}

// errCtx returns the errorContext for a command on namespace ns.
func (cf *clientFlags) errCtx(ns string) errorContext {
	return errorContext{ns: ns, control: cf.control}
}

// parseVersion parses a version number argument.
func parseVersion(what, s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("%s %q: want a version number (1, 2, …)", what, s)
	}
	return v, nil
}

// byteSize is a flag of a size in bytes: a number with an optional unit,
// binary or decimal ("96MiB", "8GiB", "1.5GB", "4096").
type byteSize int64

func (b *byteSize) String() string {
	if *b == 0 {
		return "0"
	}
	return humanize.IBytes(uint64(*b))
}

func (b *byteSize) Set(v string) error {
	n, err := humanize.ParseBytes(v)
	if err != nil || n > math.MaxInt64 {
		return fmt.Errorf("%q is not a size: want a number of bytes with an optional unit, e.g. 96MiB, 8GiB or 500MB", v)
	}
	*b = byteSize(n)
	return nil
}

// quotaFlags are the flags of a domain's quotas, shared by "lehr domain
// create" and "lehr domain update".
type quotaFlags struct {
	namespaceBytes, valueBytes, storedBytes, outbound, publishBytes byteSize
	properties, namespaces, burst, subscriptions                    int
	rate                                                            float64
}

// addQuotaFlags defines the quota flags on fs.
func addQuotaFlags(fs *flags) *quotaFlags {
	q := &quotaFlags{}
	fs.Var(&q.storedBytes, "max-stored-bytes", "`size` the domain may hold in the store, history included, e.g. 512MiB (0: server default; above it needs a fleet admin)")
	fs.Var(&q.namespaceBytes, "max-namespace-bytes", "largest `size` of keys and values in one version of a namespace (0: server default)")
	fs.Var(&q.valueBytes, "max-value-bytes", "largest value `size` (0: server default)")
	fs.IntVar(&q.properties, "max-properties", 0, "most properties in one namespace (0: server default)")
	fs.IntVar(&q.namespaces, "max-namespaces", 0, "most namespaces in the domain (0: server default)")
	fs.Float64Var(&q.rate, "publishes-per-second", 0, "sustained publish `rate` for the domain (0: server default)")
	fs.IntVar(&q.burst, "publish-burst", 0, "burst `size` for --publishes-per-second (0: server default)")
	fs.Var(&q.publishBytes, "publish-bytes-per-second", "bytes of new content per second the domain may publish, e.g. 16MiB (0: server default)")
	fs.Var(&q.outbound, "outbound-bytes-per-second", "update `bytes` per second the distributors of a zone may send of the domain, split between them, e.g. 64MiB (0: server default)")
	fs.IntVar(&q.subscriptions, "max-subscriptions", 0, "most subscriptions (host × namespace) the distributors of a zone serve of the domain, split between them (0: no limit)")
	return q
}

// quotaFlagNames are the flags addQuotaFlags defines.
var quotaFlagNames = []string{"max-stored-bytes", "max-namespace-bytes", "max-value-bytes", "max-properties", "max-namespaces",
	"publishes-per-second", "publish-burst", "publish-bytes-per-second", "outbound-bytes-per-second", "max-subscriptions"}

// check returns what is wrong with the quota flags, "" if nothing.
func (f *quotaFlags) check() string {
	for _, c := range []struct {
		name string
		v    int
	}{{"max-properties", f.properties}, {"max-namespaces", f.namespaces}, {"publish-burst", f.burst}, {"max-subscriptions", f.subscriptions}} {
		if c.v < 0 || c.v > math.MaxInt32 {
			return fmt.Sprintf("--%s %d: want 0 (the server default) to %d", c.name, c.v, math.MaxInt32)
		}
	}
	if f.rate < 0 || math.IsNaN(f.rate) || math.IsInf(f.rate, 0) {
		return fmt.Sprintf("--publishes-per-second %v: want a rate of 0 (the server default) or more", f.rate)
	}
	return ""
}

// apply sets in q the quotas whose flag is in set (every one, for a nil
// set).
func (f *quotaFlags) apply(q *lehrpb.Quotas, set map[string]bool) {
	for _, name := range quotaFlagNames {
		if set != nil && !set[name] {
			continue
		}
		switch name {
		case "max-stored-bytes":
			q.MaxStoredBytes = int64(f.storedBytes)
		case "max-namespace-bytes":
			q.MaxNamespaceBytes = int64(f.namespaceBytes)
		case "max-value-bytes":
			q.MaxValueBytes = int64(f.valueBytes)
		case "max-properties":
			q.MaxProperties = int32(f.properties)
		case "max-namespaces":
			q.MaxNamespaces = int32(f.namespaces)
		case "publishes-per-second":
			q.PublishesPerSecond = f.rate
		case "publish-burst":
			q.PublishBurst = int32(f.burst)
		case "publish-bytes-per-second":
			q.PublishBytesPerSecond = int64(f.publishBytes)
		case "outbound-bytes-per-second":
			q.OutboundBytesPerSecond = int64(f.outbound)
		case "max-subscriptions":
			q.MaxSubscriptions = int32(f.subscriptions)
		}
	}
}
