package redisbroker_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	redisbroker "github.com/errand-go/errand/brokers/redis"
)

// TestSignedMessagesOverRedis (issue 14, signed messages): the signature
// envelope survives a real broker — a signed task runs on a worker that
// requires signatures — and a message altered after signing, published
// through the same broker, is set aside with ErrBadSignature and never runs.
func TestSignedMessagesOverRedis(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			br := redisbroker.New(rdb, &redisbroker.Options{Prefix: "errand-test-signing-" + rand.Text()})
			be := memorybackend.New(nil)
			t.Cleanup(func() { br.Close(); be.Close() })
			key := []byte("0123456789abcdef0123456789abcdef")
			srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be,
				Signing: &errand.Signing{Keys: map[string][]byte{"k1": key}, SignWith: "k1", Require: true}})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			if err := srv.Register("add", func(a, b int) (int, error) { runs.Add(1); return a + b, nil }); err != nil {
				t.Fatal(err)
			}
			w := srv.NewWorker(errand.WorkerConfig{Concurrency: 2, Lease: 5 * time.Second})
			w.Start()
			defer func() {
				sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
				defer c()
				if err := w.Shutdown(sctx); err != nil {
					t.Errorf("worker shutdown: %v", err)
				}
			}()

			r, err := srv.SendTask(ctx, errand.NewSignature("add", 2, 3))
			if err != nil {
				t.Fatal(err)
			}
			var n int
			if err := r.GetInto(ctx, &n); err != nil || n != 5 {
				t.Fatalf("signing promise broken: a signed task over Redis gave %d, %v; want 5 (the envelope must survive the broker)", n, err)
			}

			sig := errand.NewSignature("add", 1, 2)
			sig.RoutingKey = errand.DefaultQueue
			body, err := errand.EncodeSignature(sig)
			if err != nil {
				t.Fatal(err)
			}
			h := hmac.New(sha256.New, key)
			h.Write([]byte("errand-sig:v1:k1:"))
			h.Write(body)
			signed := "errand-sig:v1:k1:" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)) + "\n" + string(body)
			forged := strings.Replace(signed, `"value":2`, `"value":200`, 1)
			if err := br.Publish(ctx, errand.Message{ID: sig.UUID, Queue: errand.DefaultQueue, Body: []byte(forged)}); err != nil {
				t.Fatal(err)
			}
			for {
				dl, err := setAside(ctx, br, errand.DefaultQueue)
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, m := range dl {
					if m.ID == sig.UUID {
						found = true
						if !strings.Contains(m.Reason, errand.ErrBadSignature.Error()) || !strings.Contains(m.Reason, "does not verify") {
							t.Errorf("signing promise broken: forged message set aside with reason %q; want ErrBadSignature and that the MAC does not verify", m.Reason)
						}
					}
				}
				if found {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("signing promise broken: a forged message over Redis was never set aside (archive %+v)", dl)
				case <-time.After(10 * time.Millisecond):
				}
			}
			if got := runs.Load(); got != 1 {
				t.Errorf("signing promise broken: the task ran %d times; want 1 (the forged message must never run)", got)
			}
		})
	}
}
