package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// compactTxBytes bounds one write transaction of the copy: bbolt holds a
// transaction's dirty pages in memory until it commits.
const compactTxBytes = 64 << 20

// compactProgressEvery is how often a long compaction logs its progress.
const compactProgressEvery = 5 * time.Second

// minCompactFree is the least free space worth a rewrite, whatever its
// fraction of the file: a small database is mostly bbolt's own overhead.
const minCompactFree = 4 << 20

// compactSuffix names the copy being written next to the database; a copy
// left by a crash is removed at the next start (the database it was
// copied from is intact until the rename).
const compactSuffix = ".lehr-compact"

// DBPath is where a member whose data directory is dir keeps its
// database (etcd's layout: member/snap/db).
func DBPath(dir string) string { return filepath.Join(dir, "member", "snap", "db") }

// DBSpace is the size of a member's database (as etcd reports it: the
// pages bbolt has allocated, which the file may exceed by its last
// growth step) and the part of it holding data; the rest is free pages.
type DBSpace struct {
	Size, InUse int64
}

// Free is the database's free pages, in bytes.
func (s DBSpace) Free() int64 { return s.Size - s.InUse }

// CompactResult says what compactDB did.
type CompactResult struct {
	Before, After DBSpace
	Took          time.Duration
	// Compacted is false when too little of the file was free to be worth
	// rewriting (or there was no database yet).
	Compacted bool
}

// compactDB rewrites the database of the stopped member in dir without
// its free pages when at least minFree (a fraction of the file) is free —
// what etcd's defragmentation does, but before etcd opens the file, so no
// request waits for it. The copy is written beside the database and
// renamed over it once synced: a crash leaves the old file intact.
// Progress is logged every compactProgressEvery.
func compactDB(ctx context.Context, dir string, minFree float64, log *slog.Logger) (CompactResult, error) {
	path := DBPath(dir)
	tmp := path + compactSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return CompactResult{}, fmt.Errorf("remove the copy an earlier compaction left: %w", err)
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return CompactResult{}, nil
	}
	// The options etcd opens it with (storage/backend, config_linux.go):
	// its freelist is not written to the file, so opening rebuilds it
	// from the pages in use.
	opts := &bolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType}
	src, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		return CompactResult{}, fmt.Errorf("open etcd's database %s: %w", path, err)
	}
	defer src.Close()
	before, err := dbSpace(src)
	if err != nil {
		return CompactResult{}, err
	}
	res := CompactResult{Before: before, After: before}
	if before.Free() < minCompactFree || float64(before.Free()) < minFree*float64(before.Size) {
		return res, nil
	}
	log.Info("embedetcd: compacting etcd's database before serving: free pages are given back without stalling any request",
		"path", path, "size", before.Size, "in_use", before.InUse, "free", before.Free())
	start := time.Now()
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second, NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return res, fmt.Errorf("create the compacted copy %s: %w", tmp, err)
	}
	copied := make(chan error, 1)
	go func() { copied <- bolt.Compact(dst, src, compactTxBytes) }()
	t := time.NewTicker(compactProgressEvery)
	defer t.Stop()
	for err == nil {
		select {
		case err = <-copied:
			if err == nil {
				err = errCopied
			}
		case <-t.C:
			if fi, serr := os.Stat(tmp); serr == nil {
				log.Info("embedetcd: compacting etcd's database", "written", fi.Size(), "of_about", before.InUse, "elapsed", time.Since(start).Round(time.Second))
			}
		case <-ctx.Done():
			// bolt.Compact cannot be interrupted: wait for it, then
			// drop the copy.
			<-copied
			err = ctx.Err()
		}
	}
	if !errors.Is(err, errCopied) {
		dst.Close()
		os.Remove(tmp)
		return res, fmt.Errorf("compact etcd's database: %w", err)
	}
	after, err := dbSpace(dst)
	if err != nil {
		dst.Close()
		os.Remove(tmp)
		return res, err
	}
	if err := syncClose(dst); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("sync the compacted copy: %w", err)
	}
	if err := src.Close(); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("close etcd's database: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("replace etcd's database with its compacted copy: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return res, err
	}
	res.After = after
	res.Took, res.Compacted = time.Since(start), true
	log.Info("embedetcd: compacted etcd's database", "path", path, "size_before", before.Size, "size_after", after.Size,
		"took", res.Took.Round(time.Millisecond))
	return res, nil
}

// errCopied ends compactDB's wait loop when the copy is complete.
var errCopied = errors.New("copied")

// dbSpace reads a database's size and the part of it in use, as etcd
// computes them (backend.SizeInUse).
func dbSpace(db *bolt.DB) (DBSpace, error) {
	var s DBSpace
	err := db.View(func(tx *bolt.Tx) error {
		s.Size = tx.Size()
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("read etcd's database size: %w", err)
	}
	st := db.Stats()
	s.InUse = s.Size - int64(st.FreePageN+st.PendingPageN)*int64(db.Info().PageSize)
	return s, nil
}

func syncClose(db *bolt.DB) error {
	if err := db.Sync(); err != nil {
		db.Close()
		return err
	}
	return db.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
