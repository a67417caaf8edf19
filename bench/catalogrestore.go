package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// restore measures issue 33's restore at the catalog's size, as an
// operator runs it (docs/operations.md, "Backup and restore"): "lehr
// control backup" of the running control, control stopped, its etcd
// moved aside, "lehr control restore" into the data directory, control
// started again — which commits every namespace again above the restore's
// version floor before it serves. It adds a row: the backup's time and
// size, the restore's, and the time from the start to serving.
func (c *catalogRun) restore(ctx context.Context) error {
	p := c.p
	dataDir := ""
	for i, a := range c.ctl.args {
		if a == "--data-dir" && i+1 < len(c.ctl.args) {
			dataDir = c.ctl.args[i+1]
		}
	}
	if dataDir == "" {
		return errors.New("restore: control runs without --data-dir")
	}
	file := filepath.Join(c.e.Dir, "control-backup.db")
	run := func(args ...string) (time.Duration, error) {
		start := time.Now()
		out, err := exec.CommandContext(ctx, c.bin, args...).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("lehr %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return time.Since(start), nil
	}
	backupTook, err := run("--control", c.ctlAddr, "control", "backup", file)
	if err != nil {
		return err
	}
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}
	c.ctl.stop(5 * time.Minute)
	etcdDir := filepath.Join(dataDir, "etcd")
	if err := os.Rename(etcdDir, etcdDir+".lost"); err != nil {
		return err
	}
	restoreTook, err := run("control", "restore", "--data-dir", dataDir, file)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := c.ctl.restart(); err != nil {
		return err
	}
	if err := waitServing(ctx, c.ctl, c.ctlAddr, catalogName(0, p.domains), 60*time.Minute); err != nil {
		return fmt.Errorf("serving after the restore: %w", err)
	}
	serving := time.Since(t0)
	at, _ := c.ctl.proc()
	c.res.Rows = append(c.res.Rows, *(&Row{System: "lehr-control", Case: fmt.Sprintf("backup and restore, %d namespaces", p.namespaces)}).
		Add("backup", backupTook.Seconds(), "s").Add("backup size", float64(fi.Size())/(1<<20), "MiB").
		Add("restore", restoreTook.Seconds(), "s").
		Add("to serving", serving.Seconds(), "s").Add("namespaces/s", float64(p.namespaces)/serving.Seconds(), "").
		Add("peak rss", float64(at.hwm)/(1<<20), "MiB"))
	c.res.Notes = append(c.res.Notes, "backup and restore: 'backup' is `lehr control backup` of the running control; 'restore' is `lehr control restore` into its data directory (etcd's snapshot restore, the revision raised, the restore record); "+
		"'to serving' is from control's start to its first answer, which comes after it committed every namespace again above the version floor (docs/operations.md, \"Backup and restore\").")
	return os.RemoveAll(etcdDir + ".lost")
}
