package main

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/internal/termtext"
	"lehr.dev/lehr/proto/lehrpb"
)

// errorContext helps reportError explain an API error in the terms of the
// command line.
type errorContext struct {
	// ns is the namespace the command acted on, if any.
	ns string
	// conflictHint is appended after a conflict, given the latest version.
	conflictHint func(latest uint64) string
	// lists maps a request list field ("properties", "set", "delete") to
	// the keys in request order, so "set[2].value" can name its key.
	lists map[string][]string
	// control is the address dialled, for unavailability hints.
	control string
	// write names the version the command writes to ns ("publish",
	// "patch", "rollback"), if it writes one: when control cannot tell
	// whether it was committed, the user is told how to find out.
	write string
}

var indexedField = regexp.MustCompile(`^([a-z_]+)\[(\d+)\]`)

// reportError prints err for a person and returns exitError.
func reportError(e *env, cmd string, err error, ec errorContext) int {
	if errors.Is(err, errCheckOnly) {
		return exitOK
	}
	var perr *producer.Error
	if !errors.As(err, &perr) {
		fmt.Fprintf(e.stderr, "%s: %s\n", cmd, clean(err.Error()))
		return exitError
	}
	msg := clean(perr.Message)
	if msg == "" {
		msg = perr.Code.String()
	}
	fmt.Fprintf(e.stderr, "%s: %s\n", cmd, msg)
	tw := tabwriter.NewWriter(e.stderr, 0, 0, 1, ' ', 0)
	code := perr.Code.String()
	if perr.Reason != "" {
		code = clean(perr.Reason) + " (" + code + ")"
	}
	fmt.Fprintf(tw, "  error:\t%s\n", code)
	if perr.Field != "" {
		f := clean(perr.Field)
		if m := indexedField.FindStringSubmatch(f); m != nil {
			i, _ := strconv.Atoi(m[2])
			if keys := ec.lists[m[1]]; i < len(keys) {
				f += fmt.Sprintf(" (key %q)", keys[i])
			}
		}
		fmt.Fprintf(tw, "  field:\t%s\n", f)
	}
	if perr.Limit != "" {
		fmt.Fprintf(tw, "  limit:\t%s\n", clean(perr.Limit))
	}
	tw.Flush()
	switch {
	case errors.Is(perr, producer.ErrConflict) && perr.CurrentVersion != 0:
		hint := fmt.Sprintf("latest version is %d", perr.CurrentVersion)
		if ec.conflictHint != nil {
			hint += "; " + ec.conflictHint(perr.CurrentVersion)
		}
		fmt.Fprintf(e.stderr, "  %s\n", hint)
	case perr.Code == codes.Unavailable && perr.Reason != "":
		// Control answered (its errors carry a reason; a connection
		// that failed has none): what it cannot reach is its store.
		fmt.Fprintf(e.stderr, "  control at %s is running; its store (etcd) is what does not answer, and calls succeed again once it does.\n", ec.control)
		if ec.write != "" {
			fmt.Fprintf(e.stderr, "  the %s may or may not have been committed: check 'lehr history %s' before running it again.\n", ec.write, clean(ec.ns))
		}
	case perr.Code == codes.Unavailable:
		// No control answered: the connection itself failed.
		fmt.Fprintf(e.stderr, "  is control running at %s? Start one with 'lehr control' (or 'lehr dev'), or pass --control ADDR.\n", ec.control)
	case errors.Is(perr, producer.ErrNotFound) && strings.Contains(strings.ToLower(msg), "domain"):
		fmt.Fprintln(e.stderr, "  create the domain first: lehr domain create NAME")
	}
	return exitError
}

// fmtTime formats a timestamp in UTC, "-" when absent.
func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format("2006-01-02 15:04:05Z")
}

// fmtBytes formats a byte count for people.
func fmtBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
}

// clean is termtext.Clean: s as a terminal may show it, every control
// character, bidirectional-text control, line separator and byte that is
// not UTF-8 escaped. Every text output of lehr shows what it did not write
// itself — what control stored, what distributors and agents reported, a
// server's error messages — through clean (orDash and oneLine call it), so
// an escape sequence in a --message, an author or a report cannot drive
// the terminal that shows it, nor forge a column or a line. -o json has
// the exact text.
func clean(s string) string { return termtext.Clean(s) }

// orDash returns s cleaned, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return clean(s)
}

// fmtSource says how a version came to be.
func fmtSource(v *lehrpb.VersionInfo) string {
	switch v.GetSource() {
	case lehrpb.VersionSource_VERSION_SOURCE_PATCH:
		return fmt.Sprintf("patch of %d", v.GetParent())
	case lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK:
		return fmt.Sprintf("rollback to %d", v.GetRollbackOf())
	case lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT:
		return "snapshot"
	}
	return "-"
}

func fmtKind(k lehrpb.NamespaceKind) string {
	switch k {
	case lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG:
		return "config"
	case lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY:
		return "policy"
	}
	return "-"
}

// writeVersionHeader prints a version's metadata.
func writeVersionHeader(w io.Writer, v *lehrpb.VersionInfo) {
	fmt.Fprintf(w, "%s version %d\n", clean(v.GetNamespace()), v.GetSeq())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  checksum\t%s\n", clean(v.GetChecksum()))
	fmt.Fprintf(tw, "  author\t%s\n", orDash(v.GetAuthor()))
	if ti := v.GetTransportIdentity(); ti != "" && ti != v.GetAuthor() {
		fmt.Fprintf(tw, "  via\t%s\n", clean(ti))
	}
	fmt.Fprintf(tw, "  time\t%s\n", fmtTime(v.GetCreateTime()))
	fmt.Fprintf(tw, "  message\t%s\n", orDash(v.GetMessage()))
	fmt.Fprintf(tw, "  source\t%s\n", fmtSource(v))
	fmt.Fprintf(tw, "  size\t%d properties, %s\n", v.GetPropertyCount(), fmtBytes(v.GetSizeBytes()))
	tw.Flush()
}

// writeVersion prints the output of "lehr get".
func writeVersion(w io.Writer, v *producer.Version) {
	writeVersionHeader(w, v.Info)
	if v.Partial {
		fmt.Fprintf(w, "  showing %d of them\n", len(v.Properties))
	}
	for _, p := range v.Properties {
		fmt.Fprintf(w, "\n%s  [%s]\n", clean(p.Key), orDash(p.ContentType))
		writeValue(w, p.Value, "    ")
	}
}

const hexPreview = 32

// writeValue prints a value indented: as text when termtext.Printable, otherwise its
// size and a hex preview.
func writeValue(w io.Writer, b []byte, indent string) {
	if len(b) == 0 {
		fmt.Fprintf(w, "%s(empty)\n", indent)
		return
	}
	if !termtext.Printable(b) {
		n := min(len(b), hexPreview)
		more := ""
		if n < len(b) {
			more = " …"
		}
		fmt.Fprintf(w, "%s(binary, %d bytes) %s%s\n", indent, len(b), hex.EncodeToString(b[:n]), more)
		return
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		fmt.Fprintf(w, "%s%s\n", indent, line)
	}
}

// writeHistory prints the output of "lehr history".
func writeHistory(w io.Writer, versions []*lehrpb.VersionInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tTIME\tAUTHOR\tSOURCE\tSIZE\tCHECKSUM\tMESSAGE")
	for _, v := range versions {
		sum := v.GetChecksum()
		if s, ok := strings.CutPrefix(sum, "sha256:"); ok && len(s) > 12 {
			sum = s[:12]
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", v.GetSeq(), fmtTime(v.GetCreateTime()),
			orDash(v.GetAuthor()), fmtSource(v), fmtBytes(v.GetSizeBytes()), clean(sum), orDash(oneLine(v.GetMessage())))
	}
	tw.Flush()
}

// oneLine returns the first line of s, cleaned, marked when more follows.
func oneLine(s string) string {
	s, _, cut := strings.Cut(s, "\n")
	s = clean(s)
	if cut {
		s += " …"
	}
	return s
}

// writeDiff prints the output of "lehr diff": + added, - removed,
// ~ modified keys with their values.
func writeDiff(w io.Writer, d *producer.Diff) {
	fmt.Fprintf(w, "%s: version %d → %d, %d changed %s\n", clean(d.To.GetNamespace()), d.From.GetSeq(), d.To.GetSeq(),
		len(d.Changes), plural(len(d.Changes), "key", "keys"))
	for _, c := range d.Changes {
		switch {
		case c.Old == nil:
			fmt.Fprintf(w, "+ %s  [%s]\n", clean(c.Key), orDash(c.New.ContentType))
			writeValue(w, c.New.Value, "    ")
		case c.New == nil:
			fmt.Fprintf(w, "- %s  [%s]\n", clean(c.Key), orDash(c.Old.ContentType))
			writeValue(w, c.Old.Value, "    ")
		default:
			ct := orDash(c.New.ContentType)
			if c.Old.ContentType != c.New.ContentType {
				ct = orDash(c.Old.ContentType) + " → " + ct
			}
			fmt.Fprintf(w, "~ %s  [%s]\n", clean(c.Key), ct)
			fmt.Fprintln(w, "  old:")
			writeValue(w, c.Old.Value, "    ")
			fmt.Fprintln(w, "  new:")
			writeValue(w, c.New.Value, "    ")
		}
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// writeCommitted prints the result of a write.
func writeCommitted(w io.Writer, verb string, v *lehrpb.VersionInfo) {
	fmt.Fprintf(w, "%s %s version %d (%s)\n", verb, clean(v.GetNamespace()), v.GetSeq(), fmtSource(v))
	fmt.Fprintf(w, "  checksum  %s\n  size      %d properties, %s\n", clean(v.GetChecksum()), v.GetPropertyCount(), fmtBytes(v.GetSizeBytes()))
}

// writeDomain prints one domain.
func writeDomain(w io.Writer, d *lehrpb.Domain) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name\t%s\n", clean(d.GetName()))
	fmt.Fprintf(tw, "description\t%s\n", orDash(d.GetDescription()))
	fmt.Fprintf(tw, "created\t%s by %s\n", fmtTime(d.GetCreateTime()), orDash(d.GetCreatedBy()))
	// The quotas in force, each marked when it is the server's default;
	// a control that predates effective_quotas sends only quotas.
	set, q := d.GetQuotas(), d.GetEffectiveQuotas()
	if q == nil {
		q = set
	}
	mark := func(explicit bool, s string) string {
		switch {
		case explicit:
			return s
		case d.GetEffectiveQuotas() == nil:
			return "server default" // a control that does not say which
		}
		return s + " (default)"
	}
	limit := func(v int64, f func(int64) string) string {
		if v <= 0 {
			return "no limit"
		}
		return f(v)
	}
	num := func(v int64) string { return strconv.FormatInt(v, 10) }
	if u := d.GetUsage(); u != nil {
		used := fmtBytes(u.GetStoredBytes())
		if m := q.GetMaxStoredBytes(); m > 0 {
			used += fmt.Sprintf(" of %s (%.1f %%)", fmtBytes(m), 100*float64(u.GetStoredBytes())/float64(m))
		}
		fmt.Fprintf(tw, "stored\t%s\n", used)
		nss := strconv.Itoa(int(u.GetNamespaces()))
		if m := q.GetMaxNamespaces(); m > 0 {
			nss += fmt.Sprintf(" of %d", m)
		}
		fmt.Fprintf(tw, "namespaces\t%s\n", nss)
	}
	fmt.Fprintf(tw, "max stored bytes\t%s\n", mark(set.GetMaxStoredBytes() != 0, limit(q.GetMaxStoredBytes(), fmtBytes)))
	fmt.Fprintf(tw, "max namespace size\t%s\n", mark(set.GetMaxNamespaceBytes() != 0, limit(q.GetMaxNamespaceBytes(), fmtBytes)))
	fmt.Fprintf(tw, "max value size\t%s\n", mark(set.GetMaxValueBytes() != 0, limit(q.GetMaxValueBytes(), fmtBytes)))
	fmt.Fprintf(tw, "max properties\t%s\n", mark(set.GetMaxProperties() != 0, limit(int64(q.GetMaxProperties()), num)))
	fmt.Fprintf(tw, "max namespaces\t%s\n", mark(set.GetMaxNamespaces() != 0, limit(int64(q.GetMaxNamespaces()), num)))
	rate := "no limit"
	if r := q.GetPublishesPerSecond(); r > 0 {
		rate = strconv.FormatFloat(r, 'g', -1, 64) + "/s"
		if b := q.GetPublishBurst(); b > 0 {
			rate += fmt.Sprintf(", burst %d", b)
		}
	}
	fmt.Fprintf(tw, "publish rate\t%s\n", mark(set.GetPublishesPerSecond() != 0 || set.GetPublishBurst() != 0, rate))
	fmt.Fprintf(tw, "publish bytes\t%s\n", mark(set.GetPublishBytesPerSecond() != 0,
		limit(q.GetPublishBytesPerSecond(), func(b int64) string { return fmtBytes(b) + "/s" })))
	fmt.Fprintf(tw, "outbound per zone\t%s\n", mark(set.GetOutboundBytesPerSecond() != 0,
		limit(q.GetOutboundBytesPerSecond(), func(b int64) string { return fmtBytes(b) + "/s" })))
	fmt.Fprintf(tw, "subscriptions/zone\t%s\n", mark(set.GetMaxSubscriptions() != 0, limit(int64(q.GetMaxSubscriptions()), num)))
	acl := d.GetAcl()
	list := func(l []string, empty string) string {
		if len(l) == 0 {
			return empty
		}
		return clean(strings.Join(l, ", "))
	}
	others := "the admins only"
	if len(acl.GetAdmins()) == 0 {
		others = "-"
	}
	fmt.Fprintf(tw, "admins\t%s\n", list(acl.GetAdmins(), "none: an open domain, every user may do everything"))
	fmt.Fprintf(tw, "publishers\t%s\n", list(acl.GetPublishers(), others))
	fmt.Fprintf(tw, "operators\t%s\n", list(acl.GetOperators(), others))
	if r := acl.GetReaders(); len(r) > 0 {
		fmt.Fprintf(tw, "readers\t%s\n", list(r, ""))
	}
	tw.Flush()
}

// writeDomains prints the output of "lehr domain list".
func writeDomains(w io.Writer, ds []*lehrpb.Domain) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED\tBY\tDESCRIPTION")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", clean(d.GetName()), fmtTime(d.GetCreateTime()), orDash(d.GetCreatedBy()), orDash(oneLine(d.GetDescription())))
	}
	tw.Flush()
}

// writeZones prints the output of "lehr zones list".
func writeZones(w io.Writer, zs []*lehrpb.Zone) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ZONE\tCREATED\tLAST REPORT")
	for _, z := range zs {
		last := "never"
		if z.GetLastReportTime() != nil {
			last = fmtTime(z.GetLastReportTime())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", clean(z.GetName()), fmtTime(z.GetCreateTime()), last)
	}
	tw.Flush()
}

// writeGoals prints the output of "lehr goals".
func writeGoals(w io.Writer, zone string, g *lehrpb.GetGoalsResponse) {
	fmt.Fprintf(w, "zone %s, store revision %d\n", clean(zone), g.GetRevision())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tVERSION\tCHECKSUM\tUPDATED\tREASON")
	for _, s := range g.GetGoals() {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", clean(s.GetNamespace()), s.GetVersion(), clean(s.GetChecksum()), fmtTime(s.GetUpdateTime()), orDash(s.GetReason()))
	}
	tw.Flush()
}

// printOrFail prints m as JSON and returns the exit code.
func printOrFail(e *env, m proto.Message) int {
	if err := printJSON(e.stdout, m); err != nil {
		fmt.Fprintf(e.stderr, "lehr: %v\n", err)
		return exitError
	}
	return exitOK
}

// writeGoalEvents prints one goal watch message, one line per event,
// skipping namespaces other than only (when set).
func writeGoalEvents(w io.Writer, m *lehrpb.WatchGoalsResponse, only string) {
	what := "changed"
	if m.GetInitial() {
		what = "current"
	}
	for _, ev := range m.GetEvents() {
		g := ev.GetGoal()
		if only != "" && g.GetNamespace() != only {
			continue
		}
		if ev.GetType() == lehrpb.GoalEvent_TYPE_DELETE {
			fmt.Fprintf(w, "rev %d  removed  %s\n", m.GetRevision(), clean(g.GetNamespace()))
			continue
		}
		fmt.Fprintf(w, "rev %d  %s  %s -> version %d  %s  (%s)\n", m.GetRevision(), what, clean(g.GetNamespace()), g.GetVersion(), clean(g.GetChecksum()), orDash(g.GetReason()))
	}
	if m.GetInitialComplete() {
		fmt.Fprintf(w, "rev %d  watching for changes (Ctrl-C to stop)\n", m.GetRevision())
	}
}

// servicesText lists the services of v's consumers, most first, and how
// many consumers are not listed (unnamed, or beyond the services listed):
// "checkout 3, search 1, 2 other"; "-" for none.
func servicesText(v *lehrpb.VersionCount) string {
	var parts []string
	rest := int64(v.GetConsumers())
	for _, s := range v.GetServices() {
		parts = append(parts, fmt.Sprintf("%s %d", clean(s.GetService()), s.GetConsumers()))
		rest -= int64(s.GetConsumers())
	}
	if rest > 0 {
		parts = append(parts, fmt.Sprintf("%d other", rest))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// writeZoneStatus prints the output of "lehr zones status": the zone's
// totals per namespace and version (with the goal when known), then each
// distributor's own report.
func writeZoneStatus(w io.Writer, st *lehrpb.GetZoneStatusResponse, goals map[string]uint64, haveGoals bool) {
	agents := 0
	for _, d := range st.GetDistributors() {
		agents += int(d.GetAgents())
	}
	fmt.Fprintf(w, "zone %s: %d %s reporting, %d %s connected\n", clean(st.GetZone()),
		len(st.GetDistributors()), plural(len(st.GetDistributors()), "distributor", "distributors"),
		agents, plural(agents, "agent", "agents"))
	if len(st.GetDistributors()) == 0 {
		fmt.Fprintf(w, "no distributor has reported yet (they report every --report-interval, 10s by default): is one running with --zone %s?\n", clean(st.GetZone()))
		return
	}
	writeBuilds(w, st)
	if qs := st.GetCacheQuarantines(); len(qs) > 0 {
		fmt.Fprintf(w, "\n%d %s moved an unopenable cache aside and fetched everything again (check each host's disk):\n", len(qs), plural(len(qs), "agent", "agents"))
		for _, q := range qs {
			fmt.Fprintf(w, "  %s at %s\n", clean(q.GetHostId()), q.GetQuarantineTime().AsTime().UTC().Format(time.RFC3339))
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if haveGoals {
		fmt.Fprintln(tw, "NAMESPACE\tVERSION\tAGENTS\tCONSUMERS\tGOAL\tSERVICES")
	} else {
		fmt.Fprintln(tw, "NAMESPACE\tVERSION\tAGENTS\tCONSUMERS\tSERVICES")
	}
	for _, v := range st.GetVersions() {
		if !haveGoals {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", clean(v.GetNamespace()), v.GetVersion(), v.GetAgents(), v.GetConsumers(), servicesText(v))
			continue
		}
		goal := "-"
		if gv, ok := goals[v.GetNamespace()]; ok {
			goal = strconv.FormatUint(gv, 10)
			if gv == v.GetVersion() {
				goal += " (at goal)"
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", clean(v.GetNamespace()), v.GetVersion(), v.GetAgents(), v.GetConsumers(), goal, servicesText(v))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// A control older than builds in zone status reports none: no column.
	builds := len(st.GetDistributorBuilds()) > 0
	if builds {
		fmt.Fprintln(tw, "DISTRIBUTOR\tBUILD\tAGENTS\tNAMESPACE\tVERSION\tAGENTS")
	} else {
		fmt.Fprintln(tw, "DISTRIBUTOR\tAGENTS\tNAMESPACE\tVERSION\tAGENTS")
	}
	for _, d := range st.GetDistributors() {
		rows := [][]string{{"-", "-", "-"}}
		if len(d.GetVersions()) > 0 {
			rows = rows[:0]
			for _, v := range d.GetVersions() {
				rows = append(rows, []string{clean(v.GetNamespace()), strconv.FormatUint(v.GetVersion(), 10), strconv.Itoa(int(v.GetAgents()))})
			}
		}
		for i, r := range rows {
			cols := []string{clean(d.GetDistributorId())}
			if builds {
				cols = append(cols, cmp.Or(clean(d.GetDistributorBuild()), buildinfo.Unknown))
			}
			cols = append(cols, strconv.Itoa(int(d.GetAgents())))
			if i > 0 {
				cols = make([]string, len(cols))
			}
			fmt.Fprintln(tw, strings.Join(append(cols, r...), "\t"))
		}
	}
	tw.Flush()
	writeHealth(w, st.GetHealth(), st.GetHosts())
}

// writeBuilds prints how many of a zone's distributors and agents run
// each build: an upgrade's progress.
func writeBuilds(w io.Writer, st *lehrpb.GetZoneStatusResponse) {
	type row struct{ dists, agents int32 }
	rows := map[string]*row{}
	get := func(b string) *row {
		r := rows[b]
		if r == nil {
			r = &row{}
			rows[b] = r
		}
		return r
	}
	for _, c := range st.GetDistributorBuilds() {
		get(c.GetBuild()).dists += c.GetCount()
	}
	for _, c := range st.GetAgentBuilds() {
		get(c.GetBuild()).agents += c.GetCount()
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "(control reports no builds: it is older than this lehr)")
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BUILD\tDISTRIBUTORS\tAGENTS")
	for _, b := range slices.Sorted(maps.Keys(rows)) {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", clean(b), rows[b].dists, rows[b].agents)
	}
	tw.Flush()
	if _, ok := rows[buildinfo.Unknown]; ok {
		fmt.Fprintln(w, "(unknown: distributors and agents too old to announce their build)")
	}
}

// writeHealth prints the consumer health of the namespaces a rollout is
// moving or whose consumers are in trouble, and the hosts named in it.
func writeHealth(w io.Writer, health []*lehrpb.NamespaceHealth, hosts []*lehrpb.HostReport) {
	if len(health) == 0 && len(hosts) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "consumer health (namespaces a rollout is moving, or whose consumers rejected a version or lost leases):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tVERSION\tHOSTS\tAGENTS\tCONSUMERS\tAPPLIED\tREJECTED\tLEASES LAPSED")
	for _, h := range health {
		who := "rest"
		if h.GetCohort() {
			who = "cohort"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\n", clean(h.GetNamespace()), h.GetVersion(), who, h.GetAgents(),
			h.GetConsumers(), h.GetConsumersApplied(), h.GetConsumersRejected(), h.GetLeasesExpired())
	}
	tw.Flush()
	if len(hosts) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tNAMESPACE\tVERSION\tCOHORT\tCONSUMERS\tAPPLIED\tREJECTED\tLEASES LAPSED\tAPPLIED AT\tHOST CHECKS")
	var failing []*lehrpb.HostReport
	for _, hr := range hosts {
		r := hr.GetReport()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%d\t%d\t%d\t%d\t%s\t%s\n", clean(hr.GetHostId()), clean(r.GetNamespace()), r.GetVersion(), hr.GetCohort(),
			r.GetClients(), r.GetClientsApplied(), r.GetClientsRejected(), r.GetLeasesExpired(), fmtTime(r.GetAppliedTime()), hostChecksWord(r.GetHostChecks()))
		if r.GetHostChecks().GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
			failing = append(failing, hr)
		}
	}
	tw.Flush()
	for _, hr := range hosts {
		if n := hr.GetReport().GetUntrustedUpdates(); n > 0 {
			fmt.Fprintf(w, "%s, %s: refused %d update(s) whose signature did not verify (a distributor altering content, or control signing with a key the agent does not trust)\n",
				clean(hr.GetHostId()), clean(hr.GetReport().GetNamespace()), n)
		}
	}
	if len(failing) > 0 {
		fmt.Fprintln(w, "\nhost-level canary checks failing (each host against its own history before its change):")
	}
	for _, hr := range failing {
		hc := hr.GetReport().GetHostChecks()
		fmt.Fprintf(w, "%s, %s %d → %d: %s\n", clean(hr.GetHostId()), clean(hr.GetReport().GetNamespace()), hc.GetPreviousVersion(), hc.GetVersion(), clean(hc.GetReason()))
		for _, c := range hc.GetChecks() {
			if c.GetVerdict() == lehrpb.CanaryVerdict_CANARY_VERDICT_FAIL {
				fmt.Fprintf(w, "  %s: %s\n", clean(c.GetName()), clean(c.GetExplanation()))
			}
		}
	}
}

// hostChecksWord sums a host's host-level canary checks in a table cell:
// "-" when it reports none, else the verdict and the change it judges.
func hostChecksWord(hc *lehrpb.HostChecks) string {
	if hc == nil {
		return "-"
	}
	return fmt.Sprintf("%s (%d→%d, look %d/%d)", verdictWord(hc.GetVerdict()), hc.GetPreviousVersion(), hc.GetVersion(), hc.GetLook(), hc.GetLooks())
}
