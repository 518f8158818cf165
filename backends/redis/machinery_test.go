package redisbackend_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

func machineryHarness(rdb goredis.UniversalClient) conformance.BackendHarness {
	return conformance.BackendHarness{
		New: func(t testing.TB, expiry time.Duration) errand.Backend {
			b := redisbackend.NewMachinery(rdb, &redisbackend.MachineryOptions{ResultsExpireIn: expiry})
			t.Cleanup(func() { b.Close() })
			return b
		},
		Caps: conformance.BackendCaps{Expiry: true, MinExpiry: 100 * time.Millisecond, Durable: true, Start: true, Cancel: true},
	}
}

// TestMachineryConformance runs the kit's backend and worker cases on the
// backend in machinery's format (single node: machinery's keys have no
// hash tags).
func TestMachineryConformance(t *testing.T) {
	t.Parallel()
	rdb := servers(t)["Single"]
	conformance.RunBackend(t, machineryHarness(rdb))
	conformance.RunWorker(t, conformance.MemoryBroker(memorybroker.Options{}), machineryHarness(rdb))
}

// TestMachineryClaimWaitsForMachineryLock: while a machinery worker holds
// its chord lock (TriggerChordMutex), errand's claim waits; once it is
// released the claim wins, and sets machinery's ChordTriggered.
func TestMachineryClaimWaitsForMachineryLock(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx := context.Background()
	b := redisbackend.NewMachinery(rdb, &redisbackend.MachineryOptions{ClaimWait: 200 * time.Millisecond})
	g := "group_test_" + time.Now().Format("150405.000000000")
	if err := b.InitGroup(ctx, g, []string{g + "-a"}); err != nil {
		t.Fatal(err)
	}
	defer rdb.Del(ctx, g)
	// The lock key is database-wide: another run of this test may hold it
	// for up to its 5s expiry. Wait for it rather than skip.
	for deadline := time.Now().Add(15 * time.Second); ; {
		ok, err := rdb.SetNX(ctx, redisbackend.MachineryChordMutex, "machinery-worker", 5*time.Second).Result()
		if err != nil {
			t.Fatalf("take TriggerChordMutex as a machinery worker would: %v", err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("TriggerChordMutex stayed held by someone else for 15s: cannot stand in for a machinery worker holding it")
		}
		tick := time.NewTimer(50 * time.Millisecond)
		<-tick.C
	}
	won, err := b.ClaimChord(ctx, g, "c1")
	if err == nil || won {
		t.Errorf("claim while machinery holds TriggerChordMutex: won %v, err %v; want it to wait, then fail after ClaimWait", won, err)
	}
	rdb.Del(ctx, redisbackend.MachineryChordMutex)
	if won, err := b.ClaimChord(ctx, g, "c1"); err != nil || !won {
		t.Fatalf("claim once the lock is free: %v, %v", won, err)
	}
	if won, _ := b.ClaimChord(ctx, g, "c1"); !won {
		t.Error("the claimer that won did not win again")
	}
	if won, _ := b.ClaimChord(ctx, g, "c2"); won {
		t.Error("a second claimer won")
	}
	raw := rdb.Get(ctx, g).Val()
	if want := `"ChordTriggered":true`; !contains(raw, want) {
		t.Errorf("group meta %s lacks %s: machinery workers would fire the chord again", raw, want)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestMachineryNeverExpire: result_expiry=never (machinery's
// results_expire_in < 0, which its go-redis backend keeps for good) keeps
// states, group metadata and errand's done set without a TTL.
func TestMachineryNeverExpire(t *testing.T) {
	rdb := servers(t)["Single"]
	ctx := context.Background()
	b, err := errand.OpenBackend(ctx, os.Getenv("ERRAND_REDIS_URL")+"?format=machinery&result_expiry=never")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if e := b.(driver.Expirer).ResultExpiry(); e != 0 {
		t.Errorf("ResultExpiry = %v, want 0 (results do not expire)", e)
	}
	id := "never-" + rand.Text()
	g := id + "-group"
	defer rdb.Del(ctx, id, g, g+":errand-done")
	if err := errors.Join(b.SetStates(ctx, []*errand.TaskState{{TaskUUID: id, TaskName: "x", State: errand.StateSuccess}})...); err != nil {
		t.Fatal(err)
	}
	if err := b.InitGroup(ctx, g, []string{id}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.CompleteGroupMember(ctx, g, id); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{id, g, g + ":errand-done"} {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl != -1 {
			t.Errorf("key %s: PTTL %v, want -1 (no expiry: results_expire_in < 0 keeps results for good)", k, ttl)
		}
	}
}
