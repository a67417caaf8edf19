//go:build unix

package cache

import (
	"io/fs"
	"syscall"
)

// diskUsage is the space allocated to a file (what du reports), which for
// Badger's sparse preallocated files is far below fi.Size().
func diskUsage(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}
