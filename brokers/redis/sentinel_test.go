package redisbroker_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/errand-go/errand"
	_ "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn/redistest"
)

// TestSentinelOpenErrorsHideCredentials: the master's and the sentinels'
// credentials in a redis-sentinel:// URL stay out of open errors and of
// errand.RedactURL. Port 1 refuses, so no sentinel answers; timeout=
// bounds the open's check (go-redis retries an unreachable sentinel set
// until the check's deadline).
func TestSentinelOpenErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	conformance.RunOpenRedaction(t, "broker", redistest.SentinelRedactionURLs("max_payload=lots"))
}

// TestSentinelConcurrencyLimits: the concurrency limits' scripts run
// through a Sentinel failover client as on a single node (no failover
// here: e2e's sentinel test does that): an Acquire of two keys takes both
// or neither, Renew and Free work, a slot never held is lost.
func TestSentinelConcurrencyLimits(t *testing.T) {
	t.Parallel()
	addrs, master := os.Getenv("ERRAND_REDIS_SENTINEL_ADDRS"), os.Getenv("ERRAND_REDIS_SENTINEL_MASTER")
	if addrs == "" || master == "" {
		conformance.ServiceUnavailable(t, "ERRAND_REDIS_SENTINEL_ADDRS and ERRAND_REDIS_SENTINEL_MASTER unset (scripts/services start exports them)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := "errand-sentinel-slots-" + strings.ReplaceAll(rand.Text(), "=", "")
	b, err := errand.OpenBroker(ctx, "redis-sentinel://"+addrs+"/0?master="+url.QueryEscape(master)+"&prefix="+prefix)
	if err != nil {
		conformance.ServiceUnavailable(t, "open the Redis broker through Sentinel: "+err.Error())
	}
	defer b.Close()
	cl, ok := b.(driver.ConcurrencyLimiter)
	if !ok {
		t.Fatalf("%T is no driver.ConcurrencyLimiter", b)
	}
	task, queue := driver.Slot{Key: "task:t", Limit: 1}, driver.Slot{Key: "queue:q", Limit: 2}
	acquire := func(holder string, slots ...driver.Slot) bool {
		t.Helper()
		ok, err := cl.Acquire(ctx, holder, slots, time.Minute)
		if err != nil {
			t.Fatalf("Acquire(%s): %v", holder, err)
		}
		return ok
	}
	if !acquire("a", task, queue) {
		t.Fatal("Acquire of two free keys was refused")
	}
	if acquire("b", task, queue) {
		t.Fatal("Acquire of a full key (limit 1) and a free one took them")
	}
	if !acquire("c", queue) || acquire("d", queue) {
		t.Fatal("the refused Acquire kept a slot of the free key: limit 2 held one and one more, want room for exactly one")
	}
	if err := cl.Renew(ctx, "a", []string{task.Key, queue.Key}, time.Minute); err != nil {
		t.Fatalf("Renew of held slots: %v", err)
	}
	if err := cl.Renew(ctx, "b", []string{task.Key}, time.Minute); !errors.Is(err, driver.ErrLeaseLost) {
		t.Fatalf("Renew of a slot never held: %v, want ErrLeaseLost", err)
	}
	if err := cl.Free(ctx, "a", []string{task.Key, queue.Key}); err != nil {
		t.Fatalf("Free: %v", err)
	}
	if !acquire("b", task, queue) {
		t.Fatal("after Free, Acquire of the freed slots was refused")
	}
	cl.Free(ctx, "b", []string{task.Key, queue.Key})
	cl.Free(ctx, "c", []string{queue.Key})
}
