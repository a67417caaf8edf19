package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/user"
	"path/filepath"
	"time"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/backup"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// runControlBackup is "lehr control backup".
func runControlBackup(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr control backup", doc{
		usage:   "lehr control backup [--control ADDR] [flags] FILE",
		summary: "save a consistent snapshot of control's store to FILE",
		about: `Asks control for a snapshot of its store — etcd's maintenance snapshot,
consistent at one revision, of the embedded etcd or of the external cluster
control uses — and writes it to FILE atomically (a temporary file beside it,
synced, then renamed): FILE is either the whole backup or left as it was.
Prints the etcd revision the snapshot is taken at, its size and its SHA-256
(-o json: the BackupStoreResponse message without chunk). The snapshot is
etcd's own format: 'lehr control restore' reads it, and so do etcdutl
snapshot status and etcdutl snapshot restore.

A backup holds every domain's content, so only fleet admins may take one:
the identities control's --fleet-admins names, and control's own user and
root on its unix socket. The backup is recorded in the audit log. Restore
is offline: docs/operations.md, "Backup and restore".`,
		examples: []string{
			"lehr --control unix:///run/lehr-control/control.sock control backup /var/backups/lehr/control.db",
			"lehr control backup -o json backup.db | jq -r .sha256",
		},
	})
	cf := addClientFlags(fs, e)
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 1, "FILE, where to write the backup"); !ok {
		return code
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	if e.checkOnly {
		return exitOK
	}
	file := pos[0]
	c, _, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	// Not the call timeout: a large store takes longer to stream.
	stream, err := c.RPC().BackupStore(ctx, &lehrpb.BackupStoreRequest{})
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	got, err := backup.Write(file, func() (*lehrpb.BackupStoreResponse, error) { return stream.Recv() })
	if err != nil {
		var be *backup.Error
		if errors.As(err, &be) {
			fmt.Fprintf(e.stderr, "%s: %v\n", fs.Name(), err)
			return exitError
		}
		return reportError(e, fs.Name(), apierror.FromError(err), cf.errCtx(""))
	}
	if cf.json() {
		return printOrFail(e, got)
	}
	fmt.Fprintf(e.stdout, "backed up control's store to %s\n  revision  %d\n  taken     %s\n  size      %d bytes (%s)\n  sha256    %s\n",
		clean(file), got.GetRevision(), fmtTime(got.GetBackupTime()), got.GetSizeBytes(), fmtBytes(got.GetSizeBytes()), got.GetSha256())
	return exitOK
}

// runControlRestore is "lehr control restore".
func runControlRestore(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr control restore", doc{
		usage:   "lehr control restore --data-dir DIR [flags] FILE",
		summary: "restore control's embedded store from a backup, offline",
		about: `Restores a backup ('lehr control backup') into DIR/etcd, the embedded etcd
control started with --data-dir DIR serves; DIR/etcd must not exist (move
the old one away first; control must not be running). It then writes the
restore record into the restored store and the audit log, and exits.
Start control on DIR afterwards: before it serves, it commits every
namespace's latest version of the backup again as a new version, with
every zone's goal, so every host converges to the backup's content — hosts
that held versions published after the backup too.

Version numbers go on above any the lost store can have handed out: the
highest version in the backup plus one per millisecond since the backup was
taken, plus a million for the clocks. Hosts, distributors and consumers
compare version numbers, and the versions published after the backup are
gone: were their numbers handed out again, with other content, a host that
held them would keep its copy as newer. For the same reason etcd's revision
is raised (by a million per second since the backup, plus a billion) and
marked compacted, so distributors that watched the lost store start their
watch over.

For an external etcd cluster, restore every member with etcdutl (raising
the revision: --bump-revision, --mark-compacted), start it, then record the
restore with --etcd-endpoints and --record-only, before any control replica
starts; it refuses a cluster whose revision was not raised enough, naming
the bump it needs (docs/operations.md, "Backup and restore").`,
		examples: []string{
			"lehr control restore --data-dir /var/lib/lehr-control /var/backups/lehr/control.db",
			"lehr control restore --etcd-endpoints https://etcd-0:2379 --etcd-ca ca.crt --etcd-cert c.crt --etcd-key c.key --record-only control.db",
		},
	})
	dataDir := fs.String("data-dir", control.DefaultDataDir, "`directory` control runs with (--data-dir): the backup goes to DIR/etcd, which must not exist")
	endpoints := fs.String("etcd-endpoints", "", "an external etcd cluster's client `URLs`, already restored with etcdutl: only record the restore in it (with --record-only)")
	etcdCA := fs.String("etcd-ca", "", "`file` (PEM) of the CA of the external etcd's members")
	etcdCert := fs.String("etcd-cert", "", "client certificate `file` (PEM) for the external etcd")
	etcdKey := fs.String("etcd-key", "", "key `file` (PEM) of --etcd-cert")
	recordOnly := fs.Bool("record-only", false, "do not restore etcd (etcdutl did, --etcd-endpoints names it): only write the restore record, for FILE")
	sum := fs.String("sha256", "", "refuse FILE unless its SHA-256 is this (hex, as 'lehr control backup' printed)")
	output := fs.String("o", "text", "output `format`: text or json (the restore record)")
	var quota byteSize
	fs.Var(&quota, "store-quota", "the `size` quota control runs the embedded etcd with (its --store-quota; default 8GiB): the restored etcd runs with it while the restore is recorded")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 1, "FILE, the backup"); !ok {
		return code
	}
	if *output != "text" && *output != "json" {
		return usageError(e, fs, "-o %q: want text or json", *output)
	}
	if *recordOnly != (*endpoints != "") {
		return usageError(e, fs, "--record-only and --etcd-endpoints go together: an external cluster is restored with etcdutl, then recorded here")
	}
	if e.checkOnly {
		return exitOK
	}
	who := "unix:unknown"
	if u, err := user.Current(); err == nil {
		who = "unix:" + u.Username
	}
	opts := backup.RestoreOptions{
		File: pos[0], SHA256: *sum, Author: who, Now: time.Now,
		EtcdEndpoints: splitList(*endpoints), EtcdCA: *etcdCA, EtcdCert: *etcdCert, EtcdKey: *etcdKey,
		QuotaBackendBytes: cmp.Or(int64(quota), control.DefaultStoreQuota),
	}
	if !*recordOnly {
		opts.EtcdDir = filepath.Join(*dataDir, "etcd")
	}
	rec, err := backup.Restore(ctx, opts)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", fs.Name(), err)
		return exitError
	}
	if *output == "json" {
		return printOrFail(e, rec)
	}
	where := opts.EtcdDir
	if where == "" {
		where = *endpoints
	}
	fmt.Fprintf(e.stdout, "restored the backup taken %s (etcd revision %d, sha256 %s) into %s\n  restore         %s\n  etcd revision   raised by %d, marked compacted\n  version floor   %d: every version from now on is numbered above it\n"+
		"Start control (on the restored store): it commits every namespace's latest version again above the floor, with every zone's goal, before it serves.\n",
		fmtTime(rec.GetBackupTime()), rec.GetBackupRevision(), rec.GetBackupSha256(), clean(where), rec.GetId(), rec.GetRevisionBump(), rec.GetVersionFloor())
	return exitOK
}
