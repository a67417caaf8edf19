// Package bench is Lehr's benchmark harness: scenarios that measure the real
// system (control on embedded etcd, distributors on QUIC, agents with Badger
// and files, consumers with fsnotify) and its peers (etcd watch, NATS
// JetStream KV watch) on one machine, and the results model, statistics and
// table printing they share. The peers run embedded in the bench process,
// except in the fair race (fairrace.go), where every system's server is a
// process of its own pinned to one core and its subscribers are a process
// pinned to the other.
//
// Each scenario lives in its own file and is listed by Scenarios. A Runner
// runs a selection of them at a Profile's sizes (Smoke for the package's own
// test, Quick for "make bench", Full for "make bench-full") and produces a
// Run: the machine description, the command, and one Result per scenario,
// written as JSON under bench/results/ and printed as a table.
//
// Honesty rules every scenario follows: identical payloads for Lehr and its
// peers; warm-up operations that are not measured; several repetitions, each
// summarised by its own percentiles, with the median across repetitions
// reported; durable storage (fsync on) unless a row says otherwise.
//
// Imported by cmd/lehr-bench and tests. It is never part
// of "make test"'s pass/fail beyond a smoke test that runs every scenario at
// minimal sizes.
package bench
