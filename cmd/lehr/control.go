package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"lehr.dev/lehr/internal/gomemlimit"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/alerts"
	"lehr.dev/lehr/control/metricsource"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/logflags"
	"lehr.dev/lehr/internal/sdnotify"
	"lehr.dev/lehr/internal/tlsconfig"
)

func runControl(ctx context.Context, e *env, args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "status":
			return runControlStatus(ctx, e, args[1:]) // controlstatus.go
		case "backup":
			return runControlBackup(ctx, e, args[1:]) // controlbackup.go
		case "restore":
			return runControlRestore(ctx, e, args[1:]) // controlbackup.go
		}
	}
	fs := newFlags("lehr control", doc{
		usage:   "lehr control [flags] | lehr control status|backup|restore [flags]",
		summary: "run the control plane (gRPC API, embedded or external etcd)",
		about: `Runs the control plane: the gRPC API producers and distributors talk to,
/metrics and /healthz over HTTP, and the history compactor; --http-listen
serves the API as HTTP/JSON too (curl), with the same authentication. With
no flags it starts a single-member etcd inside the process, in
DATA-DIR/etcd, and serves plaintext gRPC on 127.0.0.1:7400: nothing to set
up. --etcd-endpoints (or the environment's LEHR_ETCD_ENDPOINTS, and
LEHR_ETCD_CA, LEHR_ETCD_CERT and LEHR_ETCD_KEY for its TLS flags: the
systemd unit's /etc/lehr/control.env sets them) uses an external etcd
cluster instead, through the same code path: several replicas
share one store only through it. A replica that starts on an empty embedded
etcd says so (a warning), and 'lehr control status --control A,B,…' shows
which replica serves which store, who shares it and which replica leads the
rollout strategist.

Plaintext is served on loopback only; to listen on any other address pass
--tls-cert and --tls-key (and --client-ca to require client certificates).
Every caller has one identity, from what control verified, never from what it
says: a client certificate is the user its Lehr identity names (the URI SAN
spiffe://lehr/user/NAME, as 'lehr certs issue --role user …' makes; never the
CommonName), NAME. On one host, --socket serves the API on a unix socket too,
where each caller is the local account its uid names (the kernel says so, not
the caller): 'lehr --control unix:///run/lehr-control/control.sock push …'. A
local account ACCOUNT is the identity unix:ACCOUNT — not the certificate user
of the same name — unless --local-users maps it to one: --local-users
alice=alice makes the local account alice act as user alice. That identity is
the author of every change (and what control signs), what the audit log
names, and what domain ACLs and --fleet-admins list: a certificate user by
NAME, a local account as unix:ACCOUNT. Callers control cannot identify —
plaintext TCP, TLS without a client certificate — may only read; --dev lets
them change anything under any --as, for development only ('lehr dev' runs
so). An identified caller asserting another author (--as) is refused.

Zones are fleet-wide (every rollout reaches every zone), so creating one is a
fleet admin's act: the identities --fleet-admins names (a user certificate's
NAME, or unix:ACCOUNT for a local account on --socket), the user control runs
as and root on --socket, and a distributor registering its own zone (with a
distributor certificate of that zone). Name the first fleet admin with
--fleet-admins NAME (the systemd unit: LEHR_FLEET_ADMINS in
/etc/lehr/control.env), or create zones as control's own user on its socket.

Every version is signed with an ed25519 key (--signing-key, by default
DATA-DIR/signing.key, made on first start); its public key is written beside
it (signing.pub). Give that file to every agent (lehr-agent --trusted-keys)
and agents refuse any version control did not sign, whatever a distributor
sends. With several replicas, each signs with its own key: agents trust all
of them (concatenate the .pub files).

History keeps, per namespace, the last --keep-last versions and every version
younger than --keep-for; older ones are compacted away, except versions that
are some zone's goal. The latest version is never removed.

The store has a quota (--store-quota, 8 GiB by default for the embedded etcd).
Above the quota minus --store-reserve, new content is refused with a clear
error while rollbacks, goal moves and the audit log go on, and control
compacts and defragments etcd to give space back, disarming etcd's NOSPACE
alarm by itself. Each domain has quotas of its own (lehr domain get); only a
fleet admin (--fleet-admins) may raise one above the server default.

When etcd stops answering — a cluster that lost quorum, members control
cannot reach — every call fails within --store-timeout (10s) with UNAVAILABLE,
saying the store has no leader or did not answer, and /healthz reports
unhealthy; distributors and agents keep serving what they hold. Calls
succeed again once a majority of the etcd members is back.

A rollout policy may name alerts (its monitoring check: 'lehr rollout policy
set --help'): while one fires where the next stage moves, that stage waits,
saying which alert, since when and where, and goes on by itself once it
clears. The alerts are read from --alerts-url: Prometheus's GET
/api/v1/alerts, or VictoriaMetrics' vmalert (the same API; also a
VictoriaMetrics single node or vmselect with -vmalert.proxyURL), not
Alertmanager. The strategist's leader reads it at most once per
--alerts-interval, one read for every rollout, each bounded by
--alerts-timeout; an https URL is verified against --alerts-ca (or the
system's roots), with --alerts-cert and --alerts-key for mutual TLS. When
the source cannot be read, a stage waits or proceeds as its policy's
on_source_error says, and says so. Without --alerts-url a policy that names
alerts is refused.

A canary analysis may check a query instead of a metric the agents report
(docs/canary.md, "Sources: agent-scraped and time-series"): control fills in
each population's hosts and the interval, and runs it against --metrics-url,
a Prometheus-compatible POST /api/v1/query_range (Prometheus, VictoriaMetrics),
each request bounded by --metrics-timeout, at the agents' interval or, when
every check of an analysis is a query, at --metrics-step; an https URL is verified against
--metrics-ca, with --metrics-cert and --metrics-key for mutual TLS. A check
whose source cannot be read is NONE, saying why, never PASS. Without
--metrics-url an analysis with such a check is refused.

Stop it with Ctrl-C or SIGTERM: in-flight calls finish, then it exits.

Subcommands:
  status   the store, the replicas sharing it and the strategist's leader, as
           each replica answers ('lehr control status --help')
  backup   save a consistent snapshot of the store to a file
           ('lehr control backup --help')
  restore  restore the embedded store from a backup, offline
           ('lehr control restore --help')`,
		examples: []string{
			"lehr control",
			"lehr control --data-dir /var/lib/lehr-control --socket /run/lehr-control/control.sock --keep-last 500 --keep-for 720h --log-format json",
			"lehr control --etcd-endpoints https://etcd-0:2379,https://etcd-1:2379 --etcd-ca etcd-ca.crt --etcd-cert etcd-client.crt --etcd-key etcd-client.key --listen 0.0.0.0:7400 --tls-cert control.crt --tls-key control.key --client-ca clients.crt --fleet-admins alice,bob",
			"lehr control --socket /run/lehr-control/control.sock --local-users alice=alice,deploy=ci-bot --fleet-admins alice,unix:oncall",
			"lehr control --alerts-url https://prometheus.example:9090 --alerts-ca prometheus-ca.crt --alerts-interval 15s",
			"lehr control --metrics-url http://prometheus:9090",
		},
	})
	var opts control.Options
	fs.StringVar(&opts.DataDir, "data-dir", control.DefaultDataDir, "`directory` of the embedded etcd's data (unless --etcd-endpoints) and the signing key")
	fs.StringVar(&opts.SigningKey, "signing-key", "", "ed25519 private key `file` (PEM, mode 0600) that signs every version; default DATA-DIR/signing.key, created if missing; \"off\" signs nothing")
	endpoints := fs.String("etcd-endpoints", e.env("LEHR_ETCD_ENDPOINTS"), "comma-separated client `URLs` of an external etcd cluster (default: embedded etcd), shared by every replica: https:// with --etcd-ca, --etcd-cert and --etcd-key, or http:// on loopback only (env LEHR_ETCD_ENDPOINTS)")
	etcdCA := fs.String("etcd-ca", e.env("LEHR_ETCD_CA"), "`file` (PEM) of the CA that issued the external etcd members' certificates (env LEHR_ETCD_CA)")
	etcdCert := fs.String("etcd-cert", e.env("LEHR_ETCD_CERT"), "client certificate `file` (PEM) this replica presents to the external etcd (env LEHR_ETCD_CERT)")
	etcdKey := fs.String("etcd-key", e.env("LEHR_ETCD_KEY"), "key `file` (PEM) of --etcd-cert (env LEHR_ETCD_KEY)")
	fs.DurationVar(&opts.StoreTimeout, "store-timeout", 0, "wait at most this `duration` for etcd to answer one request: past it the call fails with UNAVAILABLE saying the store did not answer (an etcd cluster that lost quorum, members control cannot reach) instead of hanging until the caller gives up; 0: "+store.DefaultRequestTimeout.String()+" with --etcd-endpoints, no bound on the embedded etcd (it cannot lose a quorum; its requests wait out its own defragmentation)")
	fs.StringVar(&opts.Listen, "listen", control.DefaultListen, "gRPC listen `address`; without TLS it must be loopback")
	fs.StringVar(&opts.AdvertiseAddr, "advertise-address", "", "gRPC `address` (host:port) other hosts reach this replica at, as 'lehr control status' and the strategist's election name it; default --listen, with this host's name for 0.0.0.0")
	fs.StringVar(&opts.Socket, "socket", "", "also serve the API on this unix socket `path` (mode 0666), where each caller acts as its local account (SO_PEERCRED): identity unix:ACCOUNT, unless --local-users maps it")
	localUsers := fs.String("local-users", "", "comma-separated `ACCOUNT=USER` pairs: the local account ACCOUNT on --socket acts as the certificate user USER (spiffe://lehr/user/USER) for ACLs, authorship, the audit log and --fleet-admins; an account not mapped is unix:ACCOUNT, a user of its own")
	fleetAdmins := fs.String("fleet-admins", "", "comma-separated `identities` who may make fleet-wide changes (create zones, raise domain quotas above the default): a user certificate's NAME, or unix:ACCOUNT for a local account on --socket; besides control's own user and root on --socket (and distributors registering their own zone); empty: nobody else")
	fs.BoolVar(&opts.DevMode, "dev", false, "development only: callers control cannot identify (plaintext loopback, TLS without a client certificate) may change anything under any --as; off, they may only read. An identified caller's --as is refused either way")
	fs.StringVar(&opts.HTTPListen, "http-listen", "", "also serve the API as HTTP/JSON on this `address`, e.g. 127.0.0.1:7402 (curl http://127.0.0.1:7402/v1/domains; docs/operations.md, \"HTTP/JSON\"): with gRPC's TLS and client certificates, the same identities and ACLs; without TLS it must be loopback; empty (the default): off")
	fs.StringVar(&opts.MetricsListen, "metrics-listen", control.DefaultMetricsListen, "HTTP `address` of /metrics and /healthz; \"off\" disables it")
	certFile := fs.String("tls-cert", "", "server certificate `file` (PEM); enables TLS")
	keyFile := fs.String("tls-key", "", "server private key `file` (PEM)")
	clientCA := fs.String("client-ca", "", "CA `file` that client certificates must chain to (mutual TLS)")
	fs.IntVar(&opts.Retention.KeepLast, "keep-last", 100, "keep at least the newest `N` versions of each namespace")
	fs.DurationVar(&opts.Retention.KeepFor, "keep-for", 7*24*time.Hour, "keep every version younger than this `duration`")
	fs.DurationVar(&opts.Retention.Audit, "audit-retention", store.DefaultAuditRetention, "keep audit records ('lehr audit') for this `duration`")
	fs.IntVar(&opts.Retention.AuditRecords, "audit-max-records", store.DefaultAuditRecords, "keep at most `N` audit records: beyond it the history compactor removes the oldest, whatever --audit-retention says")
	fs.DurationVar(&opts.CompactInterval, "compact-interval", control.DefaultCompactInterval, "how often to compact history (`duration`; negative disables)")
	fs.BoolVar(&opts.Rollouts, "rollouts", true, "run the rollout strategist: a new version reaches zones stage by stage, as its rollout policy says (lehr rollout policy), and is rolled back on evidence; --rollouts=false moves every zone at once on every publish (for test beds of the raw delivery path)")
	fs.IntVar(&opts.MaxMessageBytes, "max-message-bytes", control.DefaultMaxMessageBytes, "largest gRPC message in `bytes`")
	var quota, reserve byteSize
	fs.Var(&quota, "store-quota", "the store's `size` quota, e.g. 8GiB: the embedded etcd's backend quota (default 8GiB), or what an external etcd before 3.6 was started with (--quota-backend-bytes; later ones report theirs)")
	fs.Var(&reserve, "store-reserve", "`size` of the store quota kept for rollbacks, goal moves and the audit log: new content is refused above quota minus it (default a fifth of the quota)")
	fs.StringVar(&opts.ConsoleURL, "console-url", "", "base `URL` people reach the console at (--http's address, or the proxy in front of it), e.g. https://lehr.example.com:8443: a canary evaluation's uri is it followed by /console/canary/ID, so every tool can link to the evaluation; empty (the default): the path alone")
	fs.StringVar(&opts.Alerts.URL, "alerts-url", "", "base `URL` of the alerts source of the rollouts' monitoring check: Prometheus or VictoriaMetrics' vmalert, e.g. http://prometheus:9090, whose /api/v1/alerts is read (user:password@ in it is sent as basic authentication); empty (the default): none, and a rollout policy that names alerts is refused")
	alertsCA := fs.String("alerts-ca", "", "CA `file` (PEM) an https --alerts-url's certificate must chain to; default the system's roots")
	alertsCert := fs.String("alerts-cert", "", "client certificate `file` (PEM) to present to an https --alerts-url (mutual TLS), with --alerts-key")
	alertsKey := fs.String("alerts-key", "", "key `file` (PEM) of --alerts-cert")
	fs.DurationVar(&opts.Alerts.Timeout, "alerts-timeout", alerts.DefaultTimeout, "give up one read of --alerts-url after this `duration`: the source counts as unreachable, and a stage waits or proceeds as its policy's on_source_error says")
	fs.StringVar(&opts.MetricsSource.URL, "metrics-url", "", "base `URL` of the metrics source of canary checks written as queries: Prometheus or VictoriaMetrics, e.g. http://prometheus:9090, whose /api/v1/query_range is queried (user:password@ in it is sent as basic authentication); empty (the default): none, and an analysis with such a check is refused")
	metricsCA := fs.String("metrics-ca", "", "CA `file` (PEM) an https --metrics-url's certificate must chain to; default the system's roots")
	metricsCert := fs.String("metrics-cert", "", "client certificate `file` (PEM) to present to an https --metrics-url (mutual TLS), with --metrics-key")
	metricsKey := fs.String("metrics-key", "", "key `file` (PEM) of --metrics-cert")
	fs.DurationVar(&opts.MetricsSource.Timeout, "metrics-timeout", metricsource.DefaultTimeout, "give up one query of --metrics-url after this `duration`: the check is NONE, saying so")
	fs.DurationVar(&opts.MetricsSource.Step, "metrics-step", metricsource.DefaultStep, "the interval (whole seconds) of a canary analysis whose checks are all queries, and so their $interval; one that also reads the agents' metrics takes the agents' interval")
	fs.DurationVar(&opts.Alerts.Interval, "alerts-interval", alerts.DefaultInterval, "read --alerts-url at most once per this `duration`, one read shared by every rollout (never more often than the strategist's rounds): how soon a stage sees an alert fire or clear")
	lf := addLogFlags(fs)
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	for _, sub := range []struct{ name, usage string }{
		{"status", "'lehr control status [flags]' (it takes the client flags, --control and the rest)"},
		{"backup", "'lehr control backup [flags] FILE' (it takes the client flags, --control and the rest)"},
		{"restore", "'lehr control restore --data-dir DIR FILE'"},
	} {
		if slices.Contains(pos, sub.name) {
			return usageError(e, fs, "%s is a subcommand: put it first, %s", sub.name, sub.usage)
		}
	}
	if code, ok := wantArgs(e, fs, pos, 0, "no arguments"); !ok {
		return code
	}
	logger, err := lf.Logger(e.stderr)
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	opts.EtcdEndpoints = splitList(*endpoints)
	switch n := countSet(*etcdCA, *etcdCert, *etcdKey); {
	case n > 0 && n < 3:
		return usageError(e, fs, "pass --etcd-ca, --etcd-cert and --etcd-key together (mutual TLS to etcd), or none of them")
	case n == 3 && len(opts.EtcdEndpoints) == 0:
		return usageError(e, fs, "--etcd-ca, --etcd-cert and --etcd-key are for an external etcd: give its --etcd-endpoints (https://HOST:2379,…)")
	case n == 3:
		if opts.EtcdTLS, err = tlsconfig.Client(*etcdCert, *etcdKey, *etcdCA, ""); err != nil {
			fmt.Fprintf(e.stderr, "lehr control: etcd TLS: %v\n", err)
			return exitError
		}
		opts.EtcdTLS.MinVersion = tls.VersionTLS12 // etcd 3.4 members speak TLS 1.2
	}
	if len(opts.EtcdEndpoints) > 0 {
		if err := control.CheckEtcdEndpoints(opts.EtcdEndpoints, opts.EtcdTLS != nil); err != nil {
			return usageError(e, fs, "--etcd-endpoints: %v", err)
		}
	}
	opts.FleetAdmins = splitList(*fleetAdmins)
	opts.StoreQuota, opts.StoreReserve = int64(quota), int64(reserve)
	if quota != 0 && quota < 16<<20 {
		return usageError(e, fs, "--store-quota %s: want at least 16MiB (etcd needs room for its own records)", &quota)
	}
	if reserve != 0 && (quota != 0 && reserve >= quota || quota == 0 && reserve >= control.DefaultStoreQuota) {
		return usageError(e, fs, "--store-reserve %s: want less than the store's quota", &reserve)
	}
	if opts.LocalUsers, err = parseLocalUsers(*localUsers); err != nil {
		return usageError(e, fs, "--local-users: %v", err)
	}
	if opts.StoreTimeout < 0 {
		return usageError(e, fs, "--store-timeout %v: want a positive duration, e.g. 10s, or 0 for the default (how long a call waits for etcd before it fails with UNAVAILABLE)", opts.StoreTimeout)
	}
	if opts.Retention.KeepLast < 1 {
		return usageError(e, fs, "--keep-last %d: want 1 or more", opts.Retention.KeepLast)
	}
	if opts.Retention.AuditRecords < 1000 {
		return usageError(e, fs, "--audit-max-records %d: want 1000 or more (a typical record is a few hundred bytes: the default %d is about 300 MiB)", opts.Retention.AuditRecords, store.DefaultAuditRecords)
	}
	if opts.Retention.Audit <= 0 {
		return usageError(e, fs, "--audit-retention %v: want a positive duration, e.g. 2160h (90 days)", opts.Retention.Audit)
	}
	if opts.Retention.KeepFor <= 0 {
		return usageError(e, fs, "--keep-for %v: want a positive duration, e.g. 168h (versions older than it may be compacted away)", opts.Retention.KeepFor)
	}
	switch {
	case (*certFile == "") != (*keyFile == ""):
		return usageError(e, fs, "pass both --tls-cert and --tls-key, or neither")
	case *clientCA != "" && *certFile == "":
		return usageError(e, fs, "--client-ca requires --tls-cert and --tls-key")
	case *certFile != "":
		if opts.TLS, err = tlsconfig.Server(*certFile, *keyFile, *clientCA); err != nil {
			fmt.Fprintf(e.stderr, "lehr control: %v\n", err)
			return exitError
		}
	}
	if code, ok := alertsOptions(e, fs, &opts, *alertsCA, *alertsCert, *alertsKey); !ok {
		return code
	}
	if code, ok := metricsOptions(e, fs, &opts, *metricsCA, *metricsCert, *metricsKey); !ok {
		return code
	}
	opts.Logger = logger
	gomemlimit.Apply(logger)
	if e.checkOnly {
		return exitOK
	}
	c, err := control.New(opts)
	if errors.Is(err, control.ErrIdentityOptions) {
		return usageError(e, fs, "%v", err)
	}
	if errors.Is(err, control.ErrPlaintextNotLoopback) {
		what, addr := "gRPC", opts.Listen
		if tlsconfig.IsLoopback(opts.Listen) {
			what, addr = "HTTP/JSON (--http-listen)", opts.HTTPListen
		}
		return usageError(e, fs, "refusing to serve plaintext %s on %s, which is not a loopback address: "+
			"pass --tls-cert and --tls-key (create them with \"lehr certs\"), or listen on 127.0.0.1", what, addr)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "lehr control: %v\n", err)
		return exitError
	}
	return serveControl(ctx, e, c, func(addr string) {
		fmt.Fprintf(e.stderr, "lehr control: serving on %s\n", addr)
	})
}

// parseLocalUsers reads --local-users: ACCOUNT=USER pairs, comma-separated,
// each account at most once. control.New checks the names.
func parseLocalUsers(s string) (map[string]string, error) {
	pairs := splitList(s)
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		account, user, ok := strings.Cut(p, "=")
		switch {
		case !ok || account == "" || user == "":
			return nil, fmt.Errorf("%q: want ACCOUNT=USER, e.g. alice=alice (the local account alice acts as the certificate user alice)", p)
		case m[account] != "":
			return nil, fmt.Errorf("local account %q is mapped twice (to %s and %s)", account, m[account], user)
		}
		m[account] = user
	}
	return m, nil
}

// serveControl runs c until ctx is done, calling onReady (then e.ready) once
// it serves. Under systemd (Type=notify) it sends READY=1 once serving and
// STOPPING=1 as shutdown begins. It returns the exit code.
func serveControl(ctx context.Context, e *env, c *control.Control, onReady func(addr string)) int {
	err := sdnotify.Serve(ctx, c, sdnotify.ServeOptions{
		Status: func() string { return "serving on " + c.Addr().String() },
		OnReady: func() {
			addr := c.Addr().String()
			onReady(addr)
			if e.ready != nil {
				e.ready(addr)
			}
		},
		Send: func(state string) error {
			// The socket comes from the command's environment (tests
			// inject it); no socket means not under systemd.
			if path := e.env(sdnotify.EnvSocket); path != "" {
				return sdnotify.Send(path, state)
			}
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(e.stderr, nil)),
	})
	if err != nil {
		fmt.Fprintf(e.stderr, "lehr control: %v\n", err)
		return exitError
	}
	return exitOK
}

// addLogFlags defines --log-level and --log-format on fs.
func addLogFlags(fs *flags) *logflags.Flags { return logflags.Register(fs.FlagSet) }

// countSet counts the non-empty strings of ss.
func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// alertsOptions checks the --alerts-* flags and completes opts.Alerts:
// its TLS from caFile (the system's roots if empty) and, for mutual TLS,
// certFile and keyFile.
func alertsOptions(e *env, fs *flags, opts *control.Options, caFile, certFile, keyFile string) (int, bool) {
	a := &opts.Alerts
	switch {
	case a.URL == "" && countSet(caFile, certFile, keyFile) > 0:
		return usageError(e, fs, "--alerts-ca, --alerts-cert and --alerts-key are for an https --alerts-url: give it too"), false
	case (certFile == "") != (keyFile == ""):
		return usageError(e, fs, "pass both --alerts-cert and --alerts-key (mutual TLS to the alerts source), or neither"), false
	case a.Timeout <= 0:
		return usageError(e, fs, "--alerts-timeout %v: want a positive duration, e.g. 5s", a.Timeout), false
	case a.Interval <= 0:
		return usageError(e, fs, "--alerts-interval %v: want a positive duration, e.g. 10s", a.Interval), false
	case a.URL == "":
		return 0, true
	}
	if caFile != "" || certFile != "" {
		if !strings.HasPrefix(a.URL, "https://") {
			return usageError(e, fs, "--alerts-ca, --alerts-cert and --alerts-key are for an https --alerts-url, not %s", a.URL), false
		}
		a.TLS = &tls.Config{MinVersion: tls.VersionTLS12} // Prometheus's own default minimum
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return usageError(e, fs, "--alerts-ca: %v", err), false
			}
			a.TLS.RootCAs = x509.NewCertPool()
			if !a.TLS.RootCAs.AppendCertsFromPEM(pem) {
				return usageError(e, fs, "--alerts-ca %s: no PEM certificate in it", caFile), false
			}
		}
		if certFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return usageError(e, fs, "--alerts-cert, --alerts-key: %v", err), false
			}
			a.TLS.Certificates = []tls.Certificate{cert}
		}
	}
	if _, err := alerts.New(*a); err != nil {
		return usageError(e, fs, "--alerts-url: %v", strings.TrimPrefix(err.Error(), "alerts: ")), false
	}
	return 0, true
}

// metricsOptions checks the --metrics-* flags and completes
// opts.MetricsSource as alertsOptions does opts.Alerts.
func metricsOptions(e *env, fs *flags, opts *control.Options, caFile, certFile, keyFile string) (int, bool) {
	m := &opts.MetricsSource
	switch {
	case m.URL == "" && countSet(caFile, certFile, keyFile) > 0:
		return usageError(e, fs, "--metrics-ca, --metrics-cert and --metrics-key are for an https --metrics-url: give it too"), false
	case (certFile == "") != (keyFile == ""):
		return usageError(e, fs, "pass both --metrics-cert and --metrics-key (mutual TLS to the metrics source), or neither"), false
	case m.Timeout <= 0:
		return usageError(e, fs, "--metrics-timeout %v: want a positive duration, e.g. 10s", m.Timeout), false
	case m.Step < time.Second || m.Step%time.Second != 0:
		return usageError(e, fs, "--metrics-step %v: want whole seconds, at least 1s, e.g. 10s", m.Step), false
	case m.URL == "":
		return 0, true
	}
	if caFile != "" || certFile != "" {
		if !strings.HasPrefix(m.URL, "https://") {
			return usageError(e, fs, "--metrics-ca, --metrics-cert and --metrics-key are for an https --metrics-url, not %s", m.URL), false
		}
		m.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return usageError(e, fs, "--metrics-ca: %v", err), false
			}
			m.TLS.RootCAs = x509.NewCertPool()
			if !m.TLS.RootCAs.AppendCertsFromPEM(pem) {
				return usageError(e, fs, "--metrics-ca %s: no PEM certificate in it", caFile), false
			}
		}
		if certFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return usageError(e, fs, "--metrics-cert, --metrics-key: %v", err), false
			}
			m.TLS.Certificates = []tls.Certificate{cert}
		}
	}
	if _, err := metricsource.New(*m); err != nil {
		return usageError(e, fs, "--metrics-url: %v", strings.TrimPrefix(err.Error(), "metrics source: ")), false
	}
	return 0, true
}
