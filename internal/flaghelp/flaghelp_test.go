package flaghelp

import (
	"bytes"
	"flag"
	"testing"
	"time"
)

func TestWrite(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("zone", "", "zone `name` served (required)")
	fs.String("data-dir", "/var/lib/lehr", "`directory` of the cache")
	fs.Bool("no-sync", false, "skip fsync")
	fs.Duration("grace", time.Minute, "how long")
	fs.String("o", "text", "output `format`")
	var b bytes.Buffer
	Write(&b, All(fs))
	want := `  --data-dir directory
      directory of the cache (default /var/lib/lehr)
  --grace duration
      how long (default 1m0s)
  --no-sync
      skip fsync
  -o format
      output format (default text)
  --zone name
      zone name served (required)
`
	if got := b.String(); got != want {
		t.Errorf("Write:\n%s\nwant:\n%s", got, want)
	}
}
