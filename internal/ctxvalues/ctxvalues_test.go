package ctxvalues

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

type key struct{}

// TestDerivedFollowsLifetime: a context derived from Of follows
// lifetime's cancellation (not values'), sees values' values first, and
// costs no goroutine while it waits.
func TestDerivedFollowsLifetime(t *testing.T) {
	lifetime, end := context.WithCancel(context.Background())
	values, endValues := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	defer endValues()
	c := Of(lifetime, values)
	if c.Value(key{}) != "v" {
		t.Fatalf("Value(key) = %v; want values' value", c.Value(key{}))
	}
	before := runtime.NumGoroutine()
	const n = 100
	derived := make([]context.Context, n)
	cancels := make([]context.CancelFunc, n)
	for i := range derived {
		derived[i], cancels[i] = context.WithTimeout(c, time.Hour)
	}
	if after := runtime.NumGoroutine(); after >= before+n {
		t.Errorf("%d contexts derived from Of started %d goroutines; want none per context", n, after-before)
	}
	endValues() // values' end is not c's
	for _, d := range derived {
		if d.Err() != nil {
			t.Fatalf("a derived context ended with values' context: %v", d.Err())
		}
	}
	end()
	for _, d := range derived {
		select {
		case <-d.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a derived context did not end with lifetime")
		}
		if !errors.Is(d.Err(), context.Canceled) {
			t.Fatalf("derived Err = %v; want context.Canceled", d.Err())
		}
	}
	for _, c := range cancels {
		c()
	}
}
