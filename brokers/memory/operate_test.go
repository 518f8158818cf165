package memorybroker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// Reject and Archive share one archive: Archived and Stats.Dead see both.
func TestRejectAndArchiveShareTheArchive(t *testing.T) {
	b := memorybroker.New(nil)
	defer b.Close()
	ctx := context.Background()
	b.Publish(ctx, msg("r", time.Time{}), msg("a", time.Time{}))
	ds, err := b.Fetch(ctx, "q", 2, time.Minute)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Fetch = %v, %v", ids(ds), err)
	}
	if err := b.Reject(ctx, ds[0], "malformed"); err != nil {
		t.Fatal(err)
	}
	e := driver.ArchiveEntry{Message: ds[1].Message, Reason: "retries exhausted", Error: "boom", Attempts: 3, At: time.Now()}
	if err := b.Archive(ctx, ds[1], e, driver.Retention{}); err != nil {
		t.Fatal(err)
	}
	dl, err := b.Archived(ctx, "q", 0, 10)
	if err != nil || len(dl) != 2 || dl[0].Reason != "retries exhausted" || dl[0].Error != "boom" || dl[1].Reason != "malformed" {
		t.Fatalf("Archived = %+v, %v; want the archived then the rejected entry (newest first), with their reasons", dl, err)
	}
	got, err := b.ArchivedEntry(ctx, "q", "r")
	if err != nil || got.Reason != "malformed" || got.Error != "malformed" || got.Attempts != 1 || got.At.IsZero() {
		t.Fatalf("ArchivedEntry(r) = %+v, %v; want Reason and Error the reject's reason, Attempts 1, At set", got, err)
	}
	if st, _ := b.Stats(ctx, "q"); st.Dead != 2 {
		t.Fatalf("Stats.Dead = %d, want 2", st.Dead)
	}
}

// List(completed) keeps the last MaxCompleted acks; Stats counts them all.
func TestCompletedIsBounded(t *testing.T) {
	b := memorybroker.New(nil)
	defer b.Close()
	ctx := context.Background()
	n := memorybroker.MaxCompleted + 5
	for i := range n {
		b.Publish(ctx, msg(fmt.Sprint(i), time.Time{}))
	}
	for done := 0; done < n; {
		ds, err := b.Fetch(ctx, "q", 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			b.Ack(ctx, []*driver.Delivery{d})
		}
		done += len(ds)
	}
	ls, err := b.List(ctx, "q", driver.ListCompleted, 0, 2*n)
	if err != nil || len(ls) != memorybroker.MaxCompleted || ls[0].ID != fmt.Sprint(n-1) {
		t.Fatalf("List(completed) = %d entries (%.80v), %v; want the last %d, newest first", len(ls), ls, err, memorybroker.MaxCompleted)
	}
	if st, _ := b.Stats(ctx, "q"); st.Completed != int64(n) {
		t.Fatalf("Stats.Completed = %d, want %d", st.Completed, n)
	}
}
