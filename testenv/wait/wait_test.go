package wait

import (
	"fmt"
	"testing"
)

func TestForReturnsOnceTrue(t *testing.T) {
	n := 0
	For(t, "three polls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond evaluated %d times; want 3", n)
	}
}

func TestUntilReturnsOnceNil(t *testing.T) {
	n := 0
	Until(t, "three polls", func() error {
		n++
		if n < 3 {
			return fmt.Errorf("n = %d", n)
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("cond evaluated %d times; want 3", n)
	}
}
