package canary

// AR1VarianceForTest exposes ar1Variance to the external tests.
var AR1VarianceForTest = ar1Variance
