package ha

import (
	"testing"

	"lehr.dev/lehr/control/store"
)

// The suite finds the strategist's leader under the key control uses.
func TestStrategistKey(t *testing.T) {
	if want := store.DefaultPrefix + "strategist/"; strategistKey != want {
		t.Errorf("strategistKey = %q, want %q", strategistKey, want)
	}
}
