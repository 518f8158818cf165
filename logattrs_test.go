package errand_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/errand-go/errand"
)

// attrRecorder is a slog.Handler keeping every record's attributes.
type attrRecorder struct {
	mu   sync.Mutex
	recs []map[string]string // the message under "msg"
}

func (h *attrRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *attrRecorder) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, m)
	return nil
}
func (h *attrRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *attrRecorder) WithGroup(string) slog.Handler      { return h }

func (h *attrRecorder) find(msg string) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.recs {
		if m["msg"] == msg {
			return m
		}
	}
	return nil
}

// TestLogLinesCarryTaskAttrs: a worker's log line about a task carries
// task, uuid, queue and attempt (issue 13, item 4: consistent attributes).
func TestLogLinesCarryTaskAttrs(t *testing.T) {
	e := newEnv(t)
	e.srv.Register("bad", func() error { return errand.Permanent(errors.New("nope")) })
	h := &attrRecorder{}
	e.start(t, errand.WorkerConfig{Logger: slog.New(h)})
	ctx := ctxT(t)
	r, err := e.srv.SendTask(ctx, errand.NewSignature("bad"))
	if err != nil {
		t.Fatal(err)
	}
	r.Get(ctx)
	const msg = "errand: task failed"
	waitFor(t, "the worker's "+msg+" line", func() bool { return h.find(msg) != nil })
	got := h.find(msg)
	want := map[string]string{"task": "bad", "uuid": r.Signature.UUID, "queue": r.Signature.RoutingKey, "attempt": "1"}
	if want["queue"] == "" {
		t.Fatalf("sent task has no queue (RoutingKey): %+v", r.Signature)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("log attributes promise broken: %q line has %s=%q, want %q (every line about a task carries task, uuid, queue, attempt): %v", msg, k, got[k], v, got)
		}
	}
}
