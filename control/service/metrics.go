package service

// Bucket upper bounds, in seconds, of the service's latency histograms.
var (
	// requestBuckets: from half a millisecond (a read served from memory)
	// to 10 s (past the store's default 5 s timeout).
	requestBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// etcdBuckets: from 100 µs (a local read) to 10 s (compactions and
	// defragmentations are not bounded by the store's timeout).
	etcdBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)
