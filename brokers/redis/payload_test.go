package redisbroker_test

// Issue 15, item 7 (producer half): a Redis broker bounds message bodies by
// default (DefaultMaxPayload), overridable and with an explicit "no limit".

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
)

// TestPayloadBoundByDefault: SendTask with a 50 MB argument on a broker
// made without a MaxPayload is refused with ErrPayloadTooLarge, and nothing
// is written: no PENDING state, no key of the queue in Redis.
func TestPayloadBoundByDefault(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "errand-test-payload-" + rand.Text()[:8]
	dropKeys(t, rdb, prefix) // should the refusal fail, 50 MB must not stay behind
	b := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix})
	defer b.Close()
	if got := b.Limits().MaxPayload; got != redisbroker.DefaultMaxPayload {
		t.Errorf("payload promise broken: a broker without Options.MaxPayload reports Limits().MaxPayload %d, want the documented default %d", got, redisbroker.DefaultMaxPayload)
	}
	backend := memorybackend.New(nil)
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: backend, DefaultQueue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	sig := errand.NewSignature("store", strings.Repeat("x", 50<<20))
	_, err = srv.SendTask(ctx, sig)
	if !errors.Is(err, errand.ErrPayloadTooLarge) {
		t.Fatalf("payload promise broken: SendTask with a 50 MB argument returned %v, want an error satisfying errors.Is(err, errand.ErrPayloadTooLarge) (default bound %d bytes)", err, redisbroker.DefaultMaxPayload)
	}
	if st, err := backend.GetState(ctx, sig.UUID); !errors.Is(err, errand.ErrTaskNotFound) {
		t.Fatalf("payload promise broken: a refused task left a state behind (%+v, %v); nothing may be written before the refusal", st, err)
	}
	noKeys(ctx, t, rdb, prefix)
}

// TestPayloadOverride: Options.MaxPayload and the max_payload URL parameter
// set the bound; a negative value lifts it; Publish on the driver itself
// refuses a batch with an oversized body before writing any of it.
func TestPayloadOverride(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	prefix := "errand-test-payload-" + rand.Text()[:8]
	dropKeys(t, rdb, prefix)
	small := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, MaxPayload: 4096})
	defer small.Close()
	if got := small.Limits().MaxPayload; got != 4096 {
		t.Fatalf("payload promise broken: Options.MaxPayload 4096 reports Limits().MaxPayload %d", got)
	}
	err := small.Publish(ctx,
		driver.Message{ID: "ok", Queue: "q", Body: []byte("{}")},
		driver.Message{ID: "big", Queue: "q", Body: make([]byte, 4097)})
	if !errors.Is(err, driver.ErrPayloadTooLarge) {
		t.Fatalf("payload promise broken: the driver's Publish of 4097 bytes (limit 4096) returned %v, want ErrPayloadTooLarge", err)
	}
	noKeys(ctx, t, rdb, prefix)

	none := redisbroker.New(rdb, &redisbroker.Options{Prefix: prefix, MaxPayload: -1})
	defer none.Close()
	if got := none.Limits().MaxPayload; got != 0 {
		t.Fatalf("payload promise broken: Options.MaxPayload -1 (no limit) reports Limits().MaxPayload %d, want 0", got)
	}
	big := driver.Message{ID: "big", Queue: "q", Body: []byte(strings.Repeat("y", 2*redisbroker.DefaultMaxPayload))}
	if err := none.Publish(ctx, big); err != nil {
		t.Fatalf("payload promise broken: with no limit, publishing %d bytes failed: %v", len(big.Body), err)
	}
	ds, err := none.Fetch(ctx, "q", 1, time.Minute)
	if err != nil || len(ds) != 1 || string(ds[0].Body) != string(big.Body) {
		t.Fatalf("payload promise broken: with no limit, a %d-byte message did not arrive intact (%d deliveries, %v)", len(big.Body), len(ds), err)
	}
	ackOne(ctx, none, ds[0])

	base := os.Getenv("ERRAND_REDIS_URL") + "?prefix=" + prefix
	for param, want := range map[string]int{"": redisbroker.DefaultMaxPayload, "&max_payload=0": redisbroker.DefaultMaxPayload,
		"&max_payload=65536": 65536, "&max_payload=-1": 0} {
		br, err := errand.OpenBroker(ctx, base+param)
		if err != nil {
			t.Fatalf("open %q: %v", param, err)
		}
		got := br.(driver.Limiter).Limits().MaxPayload
		br.Close()
		if got != want {
			t.Errorf("payload promise broken: URL %q gives Limits().MaxPayload %d, want %d", "redis://...?prefix=..."+param, got, want)
		}
	}
	if _, err := errand.OpenBroker(ctx, base+"&max_payload=lots"); err == nil || !strings.Contains(err.Error(), "max_payload") {
		t.Errorf("max_payload=lots opened a broker or failed without naming the parameter: %v", err)
	}
}

// noKeys fails when Redis holds any key under prefix.
func noKeys(ctx context.Context, t *testing.T, rdb goredis.UniversalClient, prefix string) {
	t.Helper()
	keys, err := rdb.Keys(ctx, "{"+prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Fatalf("payload promise broken: a refused publish wrote %v; nothing may be written", keys)
	}
}

// dropKeys deletes every key under prefix when the test ends.
func dropKeys(t *testing.T, rdb goredis.UniversalClient, prefix string) {
	t.Cleanup(func() {
		if keys, _ := rdb.Keys(context.Background(), "{"+prefix+":*").Result(); len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
}
