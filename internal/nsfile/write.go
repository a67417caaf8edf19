package nsfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"lehr.dev/lehr/internal/names"
)

// tempInfix separates a final file name from the random suffix of its
// temporary file: ".<name>.lehr.tmp-<random>".
const tempInfix = Ext + ".tmp-"

// Path returns the file of namespace ns under dir: <dir>/<domain>/<name>.lehr.
// ns must be a valid namespace name (package names), which cannot contain
// "..", a second "/" or a leading "." — so the path never leaves dir.
func Path(dir, ns string) (string, error) {
	domain, name, err := names.Namespace(ns)
	if err != nil {
		return "", fmt.Errorf("nsfile: path of namespace: %w", err)
	}
	return filepath.Join(dir, domain, name+Ext), nil
}

// IsTemp reports whether a base file name is a temporary file of Write.
// Consumers watching a directory ignore such names (and every name that
// starts with "." or does not end in Ext).
func IsTemp(base string) bool {
	return strings.HasPrefix(base, ".") && strings.Contains(base, tempInfix)
}

// Writer writes namespace files. The zero value is ready to use and makes
// every write durable.
type Writer struct {
	// NoSync skips the fsync of the file and of its directory. The file is
	// still replaced atomically, but a machine crash may lose the write or
	// leave the previous version. For benchmarks and tests only.
	NoSync bool
	// Perm is the permission of written files. Zero means 0o640: the
	// agent's user and group read them, nobody else (configuration holds
	// secrets); consumers read them as members of the group.
	Perm fs.FileMode
	// DirPerm is the permission of the <domain> directories. Zero means
	// 0o750.
	DirPerm fs.FileMode
	// Gid, when not 0, is the group given to written files and created
	// directories (the consumers' group); 0 keeps the group they are
	// created with (the writer's). The root group cannot be chosen.
	Gid int

	// beforeRename, when set by tests, runs after the temporary file is
	// complete and before the rename; an error aborts the write.
	beforeRename func(tmp string) error
}

// Write writes f durably to Path(dir, f.Namespace) with a zero Writer.
func Write(dir string, f File) error { return Writer{}.Write(dir, f) }

// Write writes f to Path(dir, f.Namespace): it encodes into a temporary file
// in the same directory, fsyncs it, renames it over the final name and
// fsyncs the directory. A reader opening the final name therefore sees the
// previous file or the new one, complete. On error the temporary file is
// removed and the final name is untouched. The <domain> directory is
// created (DirPerm) when missing.
func (w Writer) Write(dir string, f File) error {
	_, err := w.WriteStat(dir, f)
	return err
}

// WriteStat writes f like Write and returns the written file's size and
// modification time as they were before it was renamed into place (a
// rename keeps both): what the writer left, even if someone changes the
// file the moment it appears. On an error after the rename (the directory
// fsync) the information is returned with the error.
func (w Writer) WriteStat(dir string, f File) (fi os.FileInfo, err error) {
	path, err := Path(dir, f.Namespace)
	if err != nil {
		return nil, err
	}
	hb, err := f.header() // refuse before creating anything
	if err != nil {
		return nil, err
	}
	sub := filepath.Dir(path)
	if err := w.mkdir(dir, sub); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(sub, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("nsfile: create temporary file for %s: %w", f.Namespace, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := encode(tmp, f, hb); err != nil {
		return nil, fmt.Errorf("nsfile: write %s: %w", tmp.Name(), err)
	}
	perm := w.Perm
	if perm == 0 {
		perm = 0o640
	}
	if err := tmp.Chmod(perm); err != nil {
		return nil, fmt.Errorf("nsfile: chmod %s: %w", tmp.Name(), err)
	}
	if w.Gid != 0 {
		if err := tmp.Chown(-1, w.Gid); err != nil {
			return nil, fmt.Errorf("nsfile: give %s to group %d: %w", tmp.Name(), w.Gid, err)
		}
	}
	if !w.NoSync {
		if err := tmp.Sync(); err != nil {
			return nil, fmt.Errorf("nsfile: fsync %s: %w", tmp.Name(), err)
		}
	}
	if fi, err = tmp.Stat(); err != nil {
		return nil, fmt.Errorf("nsfile: stat %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("nsfile: close %s: %w", tmp.Name(), err)
	}
	// Crash point of the kill matrix (testenv/chaos): the temporary file
	// complete, not renamed into place.
	// gofail: var nsfileBeforeRename struct{}
	if w.beforeRename != nil {
		if err := w.beforeRename(tmp.Name()); err != nil {
			return nil, err
		}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, fmt.Errorf("nsfile: rename %s to %s: %w", tmp.Name(), path, err)
	}
	if !w.NoSync {
		if err := syncDir(sub); err != nil {
			// The rename happened; the new file is in place but may not
			// survive a machine crash. Report it without removing anything.
			return fi, err
		}
	}
	return fi, nil
}

// mkdir creates sub (a direct child of dir) when missing and makes its
// entry durable.
func (w Writer) mkdir(dir, sub string) error {
	if _, err := os.Stat(sub); err == nil {
		return nil
	}
	if err := w.MkdirAll(sub); err != nil {
		return err
	}
	if w.NoSync {
		return nil
	}
	return syncDir(dir)
}

// MkdirAll creates dir and any missing parents with DirPerm (whatever the
// umask) and, when Gid is set, gives dir to the group. The agent creates
// its files directory with it.
func (w Writer) MkdirAll(dir string) error {
	perm := w.DirPerm
	if perm == 0 {
		perm = 0o750
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("nsfile: create directory: %w", err)
	}
	if err := os.Chmod(dir, perm); err != nil {
		return fmt.Errorf("nsfile: chmod %s: %w", dir, err)
	}
	if w.Gid != 0 {
		if err := os.Chown(dir, -1, w.Gid); err != nil {
			return fmt.Errorf("nsfile: give %s to group %d: %w", dir, w.Gid, err)
		}
	}
	return nil
}

// Remove deletes the file of namespace ns under dir, durably unless
// NoSync. Removing a file that does not exist is not an error.
func (w Writer) Remove(dir, ns string) error {
	path, err := Path(dir, ns)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("nsfile: remove %s: %w", path, err)
	}
	if w.NoSync {
		return nil
	}
	return syncDir(filepath.Dir(path))
}

// CleanTemp removes temporary files that a crashed writer left in the domain
// directories under dir and returns how many it removed. Call it before
// writing, when no other Writer uses dir. A missing dir is not an error.
func CleanTemp(dir string) (int, error) {
	domains, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("nsfile: clean %s: %w", dir, err)
	}
	removed := 0
	for _, d := range domains {
		if !d.IsDir() || names.Domain(d.Name()) != nil {
			continue
		}
		sub := filepath.Join(dir, d.Name())
		entries, err := os.ReadDir(sub)
		if err != nil {
			return removed, fmt.Errorf("nsfile: clean %s: %w", sub, err)
		}
		for _, e := range entries {
			if e.Type().IsRegular() && IsTemp(e.Name()) {
				if err := os.Remove(filepath.Join(sub, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return removed, fmt.Errorf("nsfile: clean %s: %w", sub, err)
				}
				removed++
			}
		}
	}
	return removed, nil
}

// Read reads and verifies the file at path (see ReadOpen). Errors name
// the path; a missing file wraps fs.ErrNotExist.
func Read(path string) (File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return File{}, fmt.Errorf("nsfile: %w", err)
	}
	defer fh.Close()
	return ReadOpen(fh)
}

// ReadOpen reads and verifies the open file fh from its current offset
// (see Decode), and leaves it open. The file's size sizes the buffer
// its values share, so a read allocates one copy of the data. Errors
// name fh.Name().
func ReadOpen(fh *os.File) (File, error) {
	size := int64(-1)
	if fi, err := fh.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	f, err := decode(fh, size)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.Path = fh.Name()
			return File{}, err
		}
		return File{}, fmt.Errorf("nsfile: read %s: %w", fh.Name(), err)
	}
	return f, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("nsfile: open directory %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("nsfile: fsync directory %s: %w", dir, err)
	}
	return nil
}
