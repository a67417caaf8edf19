package ha_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/chaos"
	"lehr.dev/lehr/testenv/ha"
	"lehr.dev/lehr/testenv/wait"
)

// docsRestoreBlock returns the commands of the shell block of
// docs/operations.md that follows "**Restoring an external cluster.**",
// each with its "\" continuations joined and its comment cut.
func docsRestoreBlock(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	const lead = "**Restoring an external cluster.**"
	_, after, ok := strings.Cut(string(b), lead)
	if !ok {
		t.Fatalf("docs/operations.md has no %q", lead)
	}
	_, block, ok := strings.Cut(after, "\n```sh\n")
	if !ok {
		t.Fatalf("docs/operations.md: no shell block after %q", lead)
	}
	block, _, _ = strings.Cut(block, "\n```")
	var cmds []string
	cont := ""
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if i := strings.Index(l, "#"); i == 0 || i > 0 && l[i-1] == ' ' {
			l = strings.TrimSpace(l[:i])
		}
		l = strings.TrimSpace(cont + " " + l)
		if c, ok := strings.CutSuffix(l, `\`); ok {
			cont = c
			continue
		}
		cont = ""
		if l != "" {
			cmds = append(cmds, l)
		}
	}
	return cmds
}

// resyncLine is control's log line once it committed a restored store's
// namespaces again, with their number.
var resyncLine = regexp.MustCompile(`finished the restore of the store.* namespaces=([0-9]+)`)

// docsEtcdHost is how the docs name a member in names and URLs: etcd-0,
// https://etcd-0:2380 (peer), https://etcd-0:2379 (client).
var docsEtcdHost = regexp.MustCompile(`etcd-[0-9]+`)

// restoreRun is the restore of an external cluster as docs/operations.md
// writes it, run on the suite's cluster.
type restoreRun struct {
	t *testing.T
	s *ha.Suite
	// subst maps the docs' placeholders, whole arguments, to the run's.
	subst map[string]string
}

// args returns a command's arguments (not its name) with the docs'
// placeholders replaced: files, endpoints and, for a command run on
// member self (-1: none), the docs' etcd-0 in --name and
// --initial-advertise-peer-urls as that member, its data directory as
// /var/lib/etcd, and every etcd-N of --initial-cluster as member N.
func (r *restoreRun) args(docs []string, self int) []string {
	r.t.Helper()
	members := r.s.Etcd.Members
	var out []string
	for i, a := range docs {
		flag := ""
		if i > 0 {
			flag = docs[i-1]
		}
		if v, ok := r.subst[a]; ok {
			out = append(out, v)
			continue
		}
		if self >= 0 {
			switch {
			case a == "/var/lib/etcd":
				out = append(out, members[self].DataDir)
				continue
			case a == "/var/lib/etcd.lost":
				out = append(out, members[self].DataDir+".lost")
				continue
			case flag == "--name" || flag == "--initial-advertise-peer-urls":
				a = strings.ReplaceAll(a, "etcd-0", fmt.Sprintf("etcd-%d", self))
			}
		}
		for _, h := range docsEtcdHost.FindAllString(a, -1) {
			var n int
			if _, err := fmt.Sscanf(h, "etcd-%d", &n); err != nil || n >= len(members) {
				r.t.Fatalf("docs/operations.md's restore: argument %q names %s; the suite has %d members", a, h, len(members))
			}
		}
		for n, m := range members {
			h := fmt.Sprintf("etcd-%d", n)
			a = strings.ReplaceAll(a, "https://"+h+":2380", m.PeerURL)
			a = strings.ReplaceAll(a, "https://"+h+":2379", m.ClientURL)
			a = strings.ReplaceAll(a, h+"=", m.Name+"=")
			if a == h {
				a = m.Name
			}
		}
		if docsEtcdHost.MatchString(a) || strings.HasPrefix(a, "/var/") || strings.HasPrefix(a, "/etc/") {
			r.t.Fatalf("docs/operations.md's restore: argument %q (after %q) is a placeholder this test does not know: teach restoreRun.args", a, flag)
		}
		out = append(out, a)
	}
	return out
}

// exec runs a command of the docs and returns its output.
func (r *restoreRun) exec(ctx context.Context, bin string, args ...string) string {
	r.t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String())
	}
	r.t.Logf("ran %s %s (%v)", filepath.Base(bin), strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return out.String()
}

// restoreExternal is docs/operations.md's restore of an external etcd
// cluster, run as the section writes it on the suite's cluster (three etcd
// members over mutual TLS, two control replicas, a distributor, two
// agents): two namespaces published, a backup taken with "lehr control
// backup" from a replica, two more versions of one namespace that every
// agent holds, then the section's shell block, command by command —
// "systemctl stop/start" as Proc stops and starts, mv, etcdutl (built from
// testenv/ha/etcdutl) on each member and "lehr control restore
// --record-only" as real processes, with the docs' names, URLs, paths and
// files replaced by the suite's. Then: etcd's revision is raised as
// written and compacted, the restore is recorded with a floor above the
// backup's versions, each namespace's latest version is the backup's
// content again above the floor, every agent and consumer converges to it
// by checksum (the agents that held the lost newer versions too), the
// distributor's goal watch from before the restore was told its revision
// is gone and started over, the next publish converges, no view was torn
// or went backwards, and no process failed. It measures how long the
// replicas took from start to serving (they commit every namespace again
// before they serve) and to every agent holding the restored content.
//
// Besides the two namespaces the agents subscribe to, extra namespaces
// nobody subscribes to are published before the backup, for the replicas'
// start to have a store's worth of namespaces to commit again.
// It returns the figures as Markdown for the suite's report.
func restoreExternal(t *testing.T, ctx context.Context, s *ha.Suite, lehr, dir string, extra int, log *slog.Logger) string {
	steps := docsRestoreBlock(t)
	if len(steps) == 0 {
		t.Fatal("docs/operations.md's restore of an external cluster has no commands")
	}
	start := time.Now()
	etcdutl, err := ha.BuildEtcdutl(ctx, dir, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built etcdutl in %v", time.Since(start).Round(time.Millisecond))
	if err := s.WaitHealthy(ctx); err != nil {
		t.Fatalf("before the restore: %v", err)
	}
	failed := map[string]bool{}
	for _, f := range append(s.Cluster.Failures(), s.Etcd.Failures()...) {
		failed[f] = true
	}

	prod := s.Cluster.Producer()
	live, quiet := chaos.Domain+"/restore-live", chaos.Domain+"/restore-quiet"
	obs, err := chaos.Observe(ctx, s.Cluster.Agents, []string{live, quiet}, chaos.Quiet(log))
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	publish := func(ns string, kv ...string) *lehrpb.VersionInfo {
		t.Helper()
		var ps []producer.Property
		for i := 0; i+1 < len(kv); i += 2 {
			ps = append(ps, producer.Property{Key: kv[i], Value: []byte(kv[i+1])})
		}
		v, err := prod.Publish(ctx, ns, ps, producer.WithMessage("restore test"))
		if err != nil {
			t.Fatalf("Publish %s: %v", ns, err)
		}
		if v.GetSeq() == 1 { // every zone at once from the next version on
			if _, err := prod.SetRolloutPolicy(ctx, ns, &lehrpb.RolloutPolicy{GlobalBlast: true}, "restore test", 0); err != nil {
				t.Fatal(err)
			}
		}
		return v
	}
	converged := func(what, ns string, want *lehrpb.VersionInfo) {
		t.Helper()
		for _, a := range s.Cluster.Agents {
			wait.Until(t, fmt.Sprintf("%s: %s at %s@%d (%s)", what, a.HostID, ns, want.GetSeq(), want.GetChecksum()), func() error {
				st, err := a.Status(ctx)
				if err != nil {
					return err
				}
				var held *lehrpb.NamespaceStatus
				for _, n := range st.GetNamespaces() {
					if n.GetNamespace() == ns {
						held = n
					}
				}
				if held.GetVersion() != want.GetSeq() || held.GetChecksum() != want.GetChecksum() {
					return fmt.Errorf("the agent holds %d (%s)", held.GetVersion(), held.GetChecksum())
				}
				if _, err := os.Stat(held.GetPath()); err != nil {
					return err
				}
				var last *chaos.Observation
				for _, o := range obs.Observations() {
					if o.Agent == a.HostID && o.NS == ns {
						last = &o
					}
				}
				if last == nil || last.Version != want.GetSeq() || last.Checksum != want.GetChecksum() || !last.ContentSumOK {
					return fmt.Errorf("its consumer's last view: %+v", last)
				}
				return nil
			})
		}
	}

	var v []*lehrpb.VersionInfo
	for i := 1; i <= 3; i++ {
		v = append(v, publish(live, "k", fmt.Sprintf("before the backup %d", i)))
	}
	q := publish(quiet, "k", "never changes")
	// The extra namespaces, in a domain of their own (a domain holds 1,000
	// by default), four publishers at a time.
	t0 := time.Now()
	quotas := &lehrpb.Quotas{PublishesPerSecond: 1e6, PublishBurst: 1 << 20, PublishBytesPerSecond: 1 << 40, MaxStoredBytes: 1 << 40, MaxNamespaces: int32(extra)}
	if _, err := prod.CreateDomain(ctx, &lehrpb.Domain{Name: "restore", Description: "namespaces of the restored store", Quotas: quotas}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range errs {
		wg.Go(func() {
			for i := w; i < extra && errs[w] == nil; i += len(errs) {
				ns := fmt.Sprintf("restore/extra-%04d", i)
				_, errs[w] = prod.Publish(ctx, ns, []producer.Property{{Key: "k", Value: []byte(ns)}}, producer.WithMessage("restore test"))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("published %d more namespaces, nobody subscribed, in %v", extra, time.Since(t0).Round(time.Millisecond))
	converged("before the backup", live, v[2])
	converged("before the backup", quiet, q)

	// The backup, as an operator takes it: lehr control backup, from a
	// replica.
	file := filepath.Join(dir, "restore", "control.db")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, lehr, "control", "backup", "--control", s.Cluster.ControlAddrs[1], "-o", "json", file).Output()
	if err != nil {
		t.Fatalf("lehr control backup: %v %s", err, errOutput(err))
	}
	bk := new(lehrpb.BackupStoreResponse)
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(out, bk); err != nil || bk.GetRevision() == 0 || len(bk.GetSha256()) != 64 {
		t.Fatalf("lehr control backup -o json: %v; printed %s", err, out)
	}
	// etcdutl reads it (docs/operations.md: "etcdutl snapshot status FILE
	// reads it"), and says which revision the file holds: lehr control
	// backup prints the revision of etcd's answer, which writes that came
	// between the snapshot and the answer (replicas and distributors write
	// all the time) can have moved past the file's.
	var status struct {
		Revision int64 `json:"revision"`
	}
	if out, err := exec.CommandContext(ctx, etcdutl, "snapshot", "status", file, "-w", "json").Output(); err != nil {
		t.Fatalf("etcdutl snapshot status %s: %v %s", file, err, errOutput(err))
	} else if err := json.Unmarshal(out, &status); err != nil || status.Revision == 0 || status.Revision > bk.GetRevision() {
		t.Fatalf("etcdutl snapshot status %s -w json: %v, %s; want a revision, at most the %d lehr control backup printed", file, err, out, bk.GetRevision())
	}
	t.Logf("backup: revision %d (etcdutl snapshot status: %d), %d bytes, sha256 %s", bk.GetRevision(), status.Revision, bk.GetSizeBytes(), bk.GetSha256())

	// Newer content under v4 and v5, which the backup does not hold.
	for i := 4; i <= 5; i++ {
		v = append(v, publish(live, "k", fmt.Sprintf("after the backup %d", i), "extra", "lost"))
	}
	converged("after the backup", live, v[4])
	dist := s.Cluster.Distributors[ha.Zone][0]
	distLog, err := os.Stat(dist.LogPath())
	if err != nil {
		t.Fatal(err)
	}

	// docs/operations.md's commands, in its order.
	r := &restoreRun{t: t, s: s, subst: map[string]string{
		"control.db": file, "ca.crt": s.Etcd.TLS.CA, "control.crt": s.Etcd.TLS.Cert, "control.key": s.Etcd.TLS.Key, "SHA256": bk.GetSha256(),
	}}
	ran := map[string]int{}
	var restoreOut string
	var restoredAt, replicasUp time.Time
	serve := make([]time.Duration, len(s.Cluster.Controls))
	for _, step := range steps {
		f := strings.Fields(step)
		kind := f[0]
		name := step
		switch {
		case step == "systemctl stop lehr-control":
			for _, p := range s.Cluster.Controls {
				if ok, err := p.Stop(30 * time.Second); !ok || err != nil {
					t.Fatalf("stop %s: running %v, %v", p.Name, ok, err)
				}
			}
		case step == "systemctl stop etcd":
			if err := s.Etcd.Stop(s.Etcd.Members...); err != nil {
				t.Fatal(err)
			}
		case kind == "mv" || kind == "etcdutl": // on each member
			name = kind
			bin := kind
			if kind == "etcdutl" {
				bin = etcdutl
			}
			for i := range s.Etcd.Members {
				r.exec(ctx, bin, r.args(f[1:], i)...)
			}
		case step == "systemctl start etcd":
			if err := s.Etcd.Start(ctx, s.Etcd.Members...); err != nil {
				t.Fatal(err)
			}
		case kind == "lehr" && strings.HasPrefix(step, "lehr control restore "):
			name = "lehr control restore"
			restoreOut = r.exec(ctx, lehr, r.args(f[1:], -1)...)
			restoredAt = time.Now()
			t.Logf("lehr control restore printed:\n%s", restoreOut)
		case step == "systemctl start lehr-control":
			// Every replica at once, as after a restore an operator
			// would: each commits the restored namespaces again (the
			// first to get there) before it serves.
			var wg sync.WaitGroup
			errs := make([]error, len(s.Cluster.Controls))
			for i, p := range s.Cluster.Controls {
				wg.Go(func() {
					t0 := time.Now()
					errs[i] = p.Start(ctx)
					serve[i] = time.Since(t0)
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			replicasUp = time.Now()
		default:
			t.Fatalf("docs/operations.md's restore of an external cluster runs %q, which this test does not know how to run: teach restoreExternal", step)
		}
		ran[name]++
	}
	for _, want := range []string{"systemctl stop lehr-control", "systemctl stop etcd", "mv", "etcdutl", "systemctl start etcd", "lehr control restore", "systemctl start lehr-control"} {
		if ran[want] != 1 {
			t.Fatalf("docs/operations.md's restore of an external cluster: %d %q steps; want 1 (ran %v)", ran[want], want, ran)
		}
	}
	var md strings.Builder
	fmt.Fprintf(&md, "| replica | start → serving (READY=1) | namespaces it committed again |\n|---|---|---|\n")
	for i, p := range s.Cluster.Controls {
		// Each replica commits what the other has not yet (a namespace
		// committed already is its request's answer again) and says how
		// many it went through.
		resynced := "none"
		if m := resyncLine.FindStringSubmatch(p.Tail(1 << 20)); m != nil {
			resynced = m[1]
		}
		t.Logf("MEASURED: %s: start → serving (READY=1) %v after the restore; namespaces it committed again: %s (%d of them this test's, the rest earlier scenarios')",
			p.Name, serve[i].Round(time.Millisecond), resynced, extra+2)
		fmt.Fprintf(&md, "| %s | %v | %s |\n", p.Name, serve[i].Round(time.Millisecond), resynced)
	}

	// etcd: the revision raised as the docs' --bump-revision says, and
	// compacted, so nothing resumes from the lost store's revisions.
	cli := s.Etcd.Client()
	wait.Until(t, "etcd answering after the restore", func() error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cli.Get(rctx, "ha-health")
		return err
	})
	resp, err := cli.Get(ctx, "ha-health")
	if err != nil {
		t.Fatal(err)
	}
	if floor := status.Revision + 1_000_000_000_000; resp.Header.GetRevision() < floor {
		t.Errorf("etcd revision %d after the restore; want at least the backup's %d plus the docs' bump", resp.Header.GetRevision(), status.Revision)
	}
	// Any revision the lost store had (it went on from the backup's) is
	// compacted.
	if _, err := cli.Get(ctx, "ha-health", clientv3.WithRev(status.Revision+1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("a read at revision %d (after the backup's) after the restore: %v; want %v", status.Revision+1, err, rpctypes.ErrCompacted)
	}

	// The restore record: what lehr control restore --record-only wrote.
	rec, err := store.New(cli, store.Options{}).Restored(ctx)
	if err != nil || rec == nil {
		t.Fatalf("restore record: %v, %v", rec, err)
	}
	if rec.GetVersionFloor() < 3+store.RestoreMargin || rec.GetBackupRevision() != status.Revision || rec.GetBackupSha256() != bk.GetSha256() ||
		rec.GetRevisionBump() < 1_000_000_000_000 || !strings.Contains(restoreOut, fmt.Sprint(rec.GetVersionFloor())) {
		t.Errorf("restore record %v; want a floor above 3+%d, the backup's revision %d (etcdutl's) and SHA-256, etcdutl's revision bump, the floor lehr control restore printed",
			rec, store.RestoreMargin, status.Revision)
	}
	floor := rec.GetVersionFloor()

	// Every namespace's latest version is the backup's content, above the
	// floor, and every agent and consumer converges to it.
	latest := func(ns string) *lehrpb.VersionInfo {
		t.Helper()
		h, _, err := prod.HistoryPage(ctx, ns, 1, "")
		if err != nil || len(h) != 1 {
			t.Fatalf("History of %s after the restore: %v, %v", ns, h, err)
		}
		return h[0]
	}
	rl, rq := latest(live), latest(quiet)
	if rl.GetSeq() <= floor || rl.GetChecksum() != v[2].GetChecksum() || rl.GetRollbackOf() != 3 {
		t.Errorf("%s after the restore: v%d %s rollback of %d; want above the floor %d, v3's checksum %s, a rollback of 3", live,
			rl.GetSeq(), rl.GetChecksum(), rl.GetRollbackOf(), floor, v[2].GetChecksum())
	}
	if rq.GetSeq() <= floor || rq.GetChecksum() != q.GetChecksum() {
		t.Errorf("%s after the restore: v%d %s; want above the floor %d, %s", quiet, rq.GetSeq(), rq.GetChecksum(), floor, q.GetChecksum())
	}
	converged("after the restore", live, rl)
	converged("after the restore", quiet, rq)
	t.Logf("MEASURED: replicas started → every agent and consumer at the restored content: %v (lehr control restore → that: %v)",
		time.Since(replicasUp).Round(time.Millisecond), time.Since(restoredAt).Round(time.Millisecond))
	fmt.Fprintf(&md, "\nreplicas started → every agent and consumer at the restored content: %v\n", time.Since(replicasUp).Round(time.Millisecond))
	wait.For(t, "the restore record's re-commit done (resync time)", func() bool {
		rec, err := store.New(cli, store.Options{}).Restored(ctx)
		return err == nil && rec.GetResyncTime() != nil
	})

	// The distributor, which ran through it all, resumed its goal watch
	// from the lost store's revision: control told it that revision is
	// gone, and it read the goals afresh.
	wait.Until(t, "the distributor's goal watch told its revision is gone", func() error {
		b, err := os.ReadFile(dist.LogPath())
		if err != nil {
			return err
		}
		if !bytes.Contains(b[min(distLog.Size(), int64(len(b))):], []byte("goal watch revision no longer available")) {
			return fmt.Errorf("no such line in %s since the restore", dist.LogPath())
		}
		return nil
	})

	// The next publish goes above the floor and reaches every agent.
	next := publish(live, "k", "after the restore")
	if next.GetSeq() <= floor {
		t.Errorf("publish after the restore got v%d; want above the floor %d", next.GetSeq(), floor)
	}
	converged("published after the restore", live, next)

	// The audit log says what happened.
	restores := 0
	for page := ""; ; {
		audit, err := prod.RPC().ListAuditRecords(ctx, &lehrpb.ListAuditRecordsRequest{Since: timestamppb.New(start), PageSize: 1000, PageToken: page})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range audit.GetRecords() {
			if a.GetMethod() == "RestoreStore" {
				restores++
			}
		}
		if page = audit.GetNextPageToken(); page == "" {
			break
		}
	}
	t.Logf("audit: %d RestoreStore records", restores)
	if restores < 4 { // the restore, the two namespaces again, the end
		t.Errorf("audit: %d RestoreStore records since the test started; want at least 4 (the restore, %s and %s again, the end)", restores, live, quiet)
	}

	// Nothing torn, nothing backwards, nobody failed.
	prev := map[[2]string]uint64{}
	for _, o := range obs.Observations() {
		k := [2]string{o.Agent, o.NS}
		if !o.ContentSumOK {
			t.Errorf("%s's consumer saw %s@%d torn: content %s, checksum %s", o.Agent, o.NS, o.Version, o.ContentSumSeen, o.Checksum)
		}
		if o.Version < prev[k] {
			t.Errorf("%s's consumer went back from %s@%d to %d", o.Agent, o.NS, prev[k], o.Version)
		}
		prev[k] = o.Version
	}
	for _, f := range append(s.Cluster.Failures(), s.Etcd.Failures()...) {
		if !failed[f] {
			t.Errorf("process failure: %s", f)
		}
	}
	t.Logf("restored: floor %d; %s v%d → v%d (v3's content), %s → v%d; next publish v%d", floor, live, v[4].GetSeq(), rl.GetSeq(), quiet, rq.GetSeq(), next.GetSeq())
	return md.String()
}

// errOutput is an exec error's stderr, if it has one.
func errOutput(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
