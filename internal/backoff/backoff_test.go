package backoff

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestCeiling(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: time.Second}
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1, 200 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{4, time.Second},
		{1000, time.Second},
	}
	for _, tt := range tests {
		if got := p.Ceiling(tt.attempt); got != tt.want {
			t.Errorf("Ceiling(%d) = %v, want %v", tt.attempt, got, tt.want)
		}
	}
	if got := (Policy{Min: time.Second, Max: 100 * time.Millisecond}).Ceiling(0); got != 100*time.Millisecond {
		t.Errorf("Max below Min: Ceiling(0) = %v, want Max", got)
	}
	if got := (Policy{}).Full(3); got != 0 {
		t.Errorf("zero Policy: Full = %v, want 0", got)
	}
}

func TestJitterBounds(t *testing.T) {
	p := Policy{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	for attempt := range 6 {
		c := p.Ceiling(attempt)
		for range 200 {
			if d := p.Full(attempt); d < 0 || d > c {
				t.Fatalf("Full(%d) = %v, want within [0, %v]", attempt, d, c)
			}
			if d := p.Equal(attempt); d < c/2 || d > c {
				t.Fatalf("Equal(%d) = %v, want within [%v, %v]", attempt, d, c/2, c)
			}
		}
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep without cancellation reported false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep with a cancelled context reported true")
	}
}

// Sleep waits exactly d of (fake) time, or returns early when ctx ends.
// testing/synctest runs it in a bubble with a fake clock: no real waiting.
func TestSleepSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(context.Background(), time.Hour) {
			t.Fatal("Sleep(1h) = false without cancellation")
		}
		if got := time.Since(start); got != time.Hour {
			t.Errorf("Sleep(1h) took %v of bubble time, want exactly 1h", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start = time.Now()
		if Sleep(ctx, time.Hour) {
			t.Fatal("Sleep(1h) = true although ctx ended after 1m")
		}
		if got := time.Since(start); got != time.Minute {
			t.Errorf("cancelled Sleep took %v, want 1m", got)
		}
	})
}
