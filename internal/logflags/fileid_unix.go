//go:build unix

package logflags

import (
	"fmt"
	"os"
	"syscall"
)

// fileID is f's "DEVICE:INODE", as systemd writes JOURNAL_STREAM.
func fileID(f *os.File) (string, bool) {
	fi, err := f.Stat()
	if err != nil {
		return "", false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino), true
}
