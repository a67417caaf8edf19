package ha

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lehr.dev/lehr/control/store"
)

// The suite finds the strategist's leader under the key control uses.
func TestStrategistKey(t *testing.T) {
	if want := store.DefaultPrefix + "strategist/"; strategistKey != want {
		t.Errorf("strategistKey = %q, want %q", strategistKey, want)
	}
}

// The etcdutl the restore runs is the etcd version Lehr embeds: the
// version testenv/ha/etcdutl pins is go.mod's etcd server's.
func TestEtcdutlVersion(t *testing.T) {
	version := func(gomod, module string) string {
		t.Helper()
		b, err := os.ReadFile(gomod)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == module {
				return f[1]
			}
		}
		t.Fatalf("%s does not require %s", gomod, module)
		return ""
	}
	server := version(filepath.Join("..", "..", "go.mod"), "go.etcd.io/etcd/server/v3")
	if got := version(filepath.Join("etcdutl", "go.mod"), "go.etcd.io/etcd/etcdutl/v3"); got != server {
		t.Errorf("testenv/ha/etcdutl pins etcdutl %s; want %s, go.mod's go.etcd.io/etcd/server/v3 (go get -tool go.etcd.io/etcd/etcdutl/v3@%s there)", got, server, server)
	}
}
