//go:build race

package ha_test

// raceEnabled: the daemons are built with the race detector too.
const raceEnabled = true
