//go:build race

package chaos_test

// raceEnabled: the daemons are built with the race detector too.
const raceEnabled = true
