// Package producer is the Go client of the Lehr control plane for producers
// and operators: it creates domains and namespaces, publishes snapshots and
// patches, reads versions, history and diffs, rolls back, and reads or
// watches zone goal states.
//
// A Client wraps the generated gRPC client (package lehrpb) with what every
// caller would otherwise write by hand:
//
//   - plaintext only on loopback; any other address needs Options.TLS;
//   - retries with jittered exponential backoff for retryable errors only
//     (see Error.Retryable), reusing one idempotency token (request_id) per
//     logical write so that a retry after a lost response never creates a
//     second version;
//   - typed errors: every error a Client returns wraps an *Error, so callers
//     use errors.Is(err, producer.ErrConflict) and errors.As(err, &perr) to
//     read the field, reason, limit and current version — never strings;
//   - paging for list and history calls, and a goal watch that resumes from
//     the last revision it saw after a disconnect.
//
// A minimal producer:
//
//	c, err := producer.New(producer.Options{Author: "alice"})
//	if err != nil { ... }
//	defer c.Close()
//	v, err := c.Publish(ctx, "payments/limits", []producer.Property{
//		{Key: "rps", Value: []byte("100"), ContentType: "application/json"},
//	}, producer.WithMessage("raise the limit"))
//	var perr *producer.Error
//	if errors.As(err, &perr) && perr.Field != "" { ... }
//
// The package imports only proto/lehrpb and internal packages shared with the
// server; any program may import it. It never imports control, distributor or
// agent code.
package producer
