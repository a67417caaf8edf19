// Package lehrpb holds the Go code generated from proto/lehr/v1: the control
// API, the shared data-model types and the storage records, and the
// grpc-gateway handlers of the control API's HTTP/JSON mapping
// (control.pb.gw.go, served by control/httpapi). It imports no other
// package of this module. Regenerate with "make proto".
package lehrpb
