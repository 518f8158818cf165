package errand_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// keepRecorder records the retention each Archive call passes.
type keepRecorder struct {
	*memorybroker.Broker
	mu   sync.Mutex
	keep []driver.Retention
}

func (b *keepRecorder) Archive(ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
	b.mu.Lock()
	b.keep = append(b.keep, keep)
	b.mu.Unlock()
	return b.Broker.Archive(ctx, d, e, keep)
}

// WorkerConfig.ArchiveRetention defaults each field on its own (0: the
// default) and passes a negative one (no bound) through to the driver.
func TestArchiveRetentionDefaultsPerField(t *testing.T) {
	for _, tc := range []struct {
		set, want errand.Retention
	}{
		{errand.Retention{}, errand.Retention{MaxCount: errand.DefaultArchiveMaxCount, MaxAge: errand.DefaultArchiveMaxAge}},
		{errand.Retention{MaxCount: 100}, errand.Retention{MaxCount: 100, MaxAge: errand.DefaultArchiveMaxAge}},
		{errand.Retention{MaxAge: time.Hour}, errand.Retention{MaxCount: errand.DefaultArchiveMaxCount, MaxAge: time.Hour}},
		{errand.Retention{MaxCount: -1, MaxAge: -1}, errand.Retention{MaxCount: -1, MaxAge: -1}},
	} {
		br := &keepRecorder{Broker: memorybroker.New(nil)}
		be := memorybackend.New(nil)
		srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be})
		if err != nil {
			t.Fatal(err)
		}
		srv.Register("fail", func() error { return errand.Permanent(errors.New("no")) })
		ctx := ctxT(t)
		w := srv.NewWorker(errand.WorkerConfig{ArchiveRetention: tc.set, PausePoll: -1, Heartbeat: -1})
		w.Start()
		r, err := srv.SendTask(ctx, errand.NewSignature("fail"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Get(ctx); err == nil {
			t.Fatal("the failing task succeeded")
		}
		// The archive follows the FAILURE record: wait for it.
		for deadline := time.Now().Add(5 * time.Second); ; {
			br.mu.Lock()
			n := len(br.keep)
			br.mu.Unlock()
			if n > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if err := w.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		br.mu.Lock()
		if len(br.keep) != 1 || br.keep[0] != tc.want {
			t.Errorf("ArchiveRetention %+v: the worker archived with %+v; want %+v (each field defaults on its own, negative is no bound)", tc.set, br.keep, tc.want)
		}
		br.mu.Unlock()
		br.Close()
		be.Close()
	}
}
