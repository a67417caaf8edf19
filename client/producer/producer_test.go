package producer

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"
)

func TestNewRefusesPlaintextOffLoopback(t *testing.T) {
	_, err := New(Options{Address: "10.1.2.3:7400"})
	var perr *Error
	if !errors.As(err, &perr) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("New(non-loopback, no TLS) error = %v, want an *Error matching ErrInvalid", err)
	}
	if perr.Field != "address" {
		t.Errorf("Field = %q, want %q", perr.Field, "address")
	}

	c, err := New(Options{Address: "10.1.2.3:7400", TLS: &tls.Config{ServerName: "control"}})
	if err != nil {
		t.Fatalf("New(non-loopback, TLS) = %v, want success", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v, want nil (idempotent)", err)
	}

	c, err = New(Options{})
	if err != nil {
		t.Fatalf("New(zero Options) = %v", err)
	}
	defer c.Close()
	if got := c.Address(); got != DefaultAddress {
		t.Errorf("Address() = %q, want %q", got, DefaultAddress)
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	p := RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}.withDefaults()
	if p.MaxAttempts != 5 {
		t.Errorf("default MaxAttempts = %d, want 5", p.MaxAttempts)
	}
	for n, base := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		base *= time.Millisecond
		for range 100 {
			got := p.backoff(n)
			if got < base/2 || got > base {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, got, base/2, base)
			}
		}
	}
}

func TestRequestIDsAreUniqueHex(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newRequestID()
		if len(id) != 32 {
			t.Fatalf("request id %q has %d chars, want 32", id, len(id))
		}
		if seen[id] {
			t.Fatalf("request id %q repeated", id)
		}
		seen[id] = true
	}
}

func TestWriteOptionsAllocateOneRequestID(t *testing.T) {
	a := writeOpts(nil)
	b := writeOpts(nil)
	if a.requestID == "" || a.requestID == b.requestID {
		t.Errorf("writeOpts request ids %q, %q: want distinct, non-empty", a.requestID, b.requestID)
	}
	if got := writeOpts([]PublishOption{WithRequestID("fixed"), WithMessage("m")}); got.requestID != "fixed" || got.message != "m" {
		t.Errorf("writeOpts(WithRequestID, WithMessage) = %+v", got)
	}
}
