// Package lehrpb holds the Go code generated from proto/lehr/v1: the control
// API, the shared data-model types and the storage records. It imports no
// other package of this module. Regenerate with "make proto".
package lehrpb
