//go:build !unix

package logflags

import "os"

// fileID: no journal outside Unix.
func fileID(*os.File) (string, bool) { return "", false }
