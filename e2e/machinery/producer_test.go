package machinerye2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
)

// TestRedisErrandProducerMachineryWorkers: step 5 of the migration, a
// producer moved to errand while machinery workers still run. An errand
// producer on machinery's formats sends tasks, an ETA task, a chain, a
// group and a chord of 100 onto machinery's Redis queue; machinery workers
// alone run them (machinery completes the group errand initialised and
// fires its chord), and errand's results read what machinery recorded.
func TestRedisErrandProducerMachineryWorkers(t *testing.T) {
	rs := newRedis(t)
	queue, delayed := unique("machinery-prod-q"), unique("machinery-prod-delayed")
	r := newRuns()
	machineryWorker(t, machineryRedis(rs, machineryConfig(queue, delayed)), r)

	srv, err := errand.NewServer(errand.Config{
		Broker:       redisbroker.NewMachinery(rs.client, &redisbroker.MachineryOptions{DefaultQueue: queue, DelayedTasksKey: delayed}),
		Backend:      redisbackend.NewMachinery(rs.client, nil),
		DefaultQueue: queue,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	want := errandProducer(t, srv, r)
	r.exactlyOnce(t, want)
	if k := r.kinds(); k["errand"] != 0 {
		t.Errorf("errand workers ran %d tasks in a test without any", k["errand"])
	}
}

// errandProducer sends, through the errand server srv on machinery's
// formats, a task, an ETA task, a chain and a chord of 100, reads every
// result with errand's results, and returns how often each must have run.
func errandProducer(t *testing.T, srv *errand.Server, r *runs) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), getTimeout)
	defer cancel()
	id := unique("p")
	want := map[string]int{}
	tag := func(s string) string { tg := id + "-" + s; want[tg] = 1; return tg }

	plain, err := srv.SendTask(ctx, errand.NewSignature("add", tag("plain"), int64(40), int64(2)))
	if err != nil {
		t.Fatal(err)
	}
	later := errand.NewSignature("add", tag("eta"), int64(1), int64(1))
	eta := time.Now().Add(time.Second)
	later.ETA = &eta
	delayedRes, err := srv.SendTask(ctx, later)
	if err != nil {
		t.Fatal(err)
	}
	chain, _ := errand.NewChain(errand.NewSignature("add", tag("chain0"), int64(1), int64(2)), errand.NewSignature("mul", tag("chain1"), int64(3)))
	chainRes, err := srv.SendChain(ctx, chain)
	if err != nil {
		t.Fatal(err)
	}
	var members []*errand.Signature
	var sum int64
	for i := 1; i <= 100; i++ {
		members = append(members, errand.NewSignature("square", tag(fmt.Sprint("chord", i)), int64(i)))
		sum += int64(i * i)
	}
	group, _ := errand.NewGroup(members...)
	chord, _ := errand.NewChord(group, errand.NewSignature("sum", tag("chord-callback")))
	chordRes, err := srv.SendChord(ctx, chord, errand.SendConcurrency(10))
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		what string
		get  func(dst ...any) error
		want int64
	}{
		{"plain task", func(d ...any) error { return plain.GetInto(ctx, d...) }, 42},
		{"ETA task", func(d ...any) error { return delayedRes.GetInto(ctx, d...) }, 2},
		{"chain", func(d ...any) error { return chainRes.GetInto(ctx, d...) }, 9},
		{"chord of 100", func(d ...any) error { return chordRes.GetInto(ctx, d...) }, sum},
	} {
		var got int64
		if err := c.get(&got); err != nil || got != c.want {
			t.Errorf("%s sent by errand, run by machinery: errand read %d, %v; want %d", c.what, got, err, c.want)
		}
	}
	if at, _ := r.firstRun(id + "-eta"); at.Before(eta) {
		t.Errorf("ETA task ran %s before its ETA", eta.Sub(at))
	}
	return want
}
