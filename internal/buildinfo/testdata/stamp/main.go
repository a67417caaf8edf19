// Command stamp prints its own build string (buildinfo.Get().String()):
// TestMakeBuildStamp builds it with make build's -ldflags.
package main

import (
	"fmt"

	"lehr.dev/lehr/internal/buildinfo"
)

func main() { fmt.Println(buildinfo.Get()) }
