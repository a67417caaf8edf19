package agentcmd

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"lehr.dev/lehr/internal/pki"
)

func testCerts(t *testing.T) (ca, cert, key string) {
	dir := t.TempDir()
	c, err := pki.NewCA(filepath.Join(dir, "ca"), "test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err = c.IssueFiles(filepath.Join(dir, "leaf"), "host-1", pki.Client, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "ca", pki.CACertFile), cert, key
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, &out); code != 0 {
		t.Errorf("--help exit code %d, want 0", code)
	}
	for _, want := range []string{"Examples:", "--zone", "-distributors", "-data-dir", "lehr watch"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help output lacks %q", want)
		}
	}
}

func TestParse(t *testing.T) {
	ca, cert, key := testCerts(t)
	creds := []string{"--tls-ca", ca, "--tls-cert", cert, "--tls-key", key}
	o, _, err := parse(append([]string{"--zone", "zone-a", "--distributors", "127.0.0.1:1, 127.0.0.1:2",
		"--labels", "role=canary,rack=r1", "--data-dir", "/tmp/x/", "--lease-ttl", "10s"}, creds...), &bytes.Buffer{})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if diff := cmp.Diff([]string{"127.0.0.1:1", "127.0.0.1:2"}, o.Distributors); diff != "" {
		t.Errorf("distributors (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"role": "canary", "rack": "r1"}, o.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if o.DataDir != "/tmp/x" || o.LeaseTTL != 10*time.Second || o.TLS == nil || o.NoSync {
		t.Errorf("parsed options %+v: want data dir /tmp/x, TTL 10s, TLS set, durable writes", o)
	}

	bad := []struct {
		name string
		args []string
		want string
	}{
		{"no zone", append([]string{"--distributors", "127.0.0.1:1"}, creds...), "--zone"},
		{"no distributors", append([]string{"--zone", "z"}, creds...), "--distributors"},
		{"bad distributor", append([]string{"--zone", "z", "--distributors", "nohost"}, creds...), "host:port"},
		{"bad label", append([]string{"--zone", "z", "--distributors", "a:1", "--labels", "x"}, creds...), "--labels"},
		{"no certs", []string{"--zone", "z", "--distributors", "a:1"}, "--tls-cert"},
		{"bad level", append([]string{"--zone", "z", "--distributors", "a:1", "--log-level", "loud"}, creds...), "--log-level"},
		{"stray argument", append([]string{"--zone", "z", "--distributors", "a:1", "extra"}, creds...), "extra"},
	}
	for _, tc := range bad {
		_, _, err := parse(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"--zone", "z"}, &out); code != 2 {
		t.Errorf("Main with bad flags: exit %d, want 2 (output %q)", code, out.String())
	}
}
