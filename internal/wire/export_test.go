package wire

// SessionDropAfter is sessionDropAfter, for the external tests.
const SessionDropAfter = sessionDropAfter
