package memorybackend_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	"github.com/errand-go/errand/driver"
)

func TestExpiryAndWait(t *testing.T) {
	b := memorybackend.New(&memorybackend.Options{ResultExpiry: 30 * time.Millisecond})
	defer b.Close()
	ctx := context.Background()
	b.SetStates(ctx, []*errand.TaskState{{TaskUUID: "t", State: errand.StateStarted}})
	// A waiter on a task that never finishes learns of its expiry instead of hanging.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := b.WaitState(wctx, "t", func(st *errand.TaskState) bool { return st.State.Terminal() })
	if !errors.Is(err, errand.ErrTaskNotFound) {
		t.Fatalf("WaitState on an expiring task = %v, want ErrTaskNotFound", err)
	}
}

func TestGroupCompletionIdempotentAndChordClaimOnce(t *testing.T) {
	b := memorybackend.New(nil)
	defer b.Close()
	ctx := context.Background()
	b.InitGroup(ctx, "g", []string{"a", "b"})
	b.CompleteGroupMember(ctx, "g", "a")
	if d, n, _ := b.CompleteGroupMember(ctx, "g", "a"); d != 1 || n != 2 {
		t.Fatalf("redelivered member counted twice: %d/%d", d, n)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			if ok, _ := b.ClaimChord(ctx, "g", string(rune('A'+i))); ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d claimers won the chord, want exactly 1", wins.Load())
	}
	if _, err := b.ClaimChord(ctx, "nope", "x"); !errors.Is(err, driver.ErrGroupNotFound) {
		t.Fatalf("claim on unknown group = %v", err)
	}
}
