package machinerye2e

import (
	"testing"

	machinery "github.com/RichardKnop/machinery/v2"
	mbackend "github.com/RichardKnop/machinery/v2/backends/redis"
	mbroker "github.com/RichardKnop/machinery/v2/brokers/redis"
	"github.com/RichardKnop/machinery/v2/config"
	"github.com/RichardKnop/machinery/v2/locks/eager"

	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
)

// machineryConfig is a machinery config on its own queue and delayed set.
func machineryConfig(queue, delayed string) *config.Config {
	return &config.Config{
		DefaultQueue:    queue,
		ResultsExpireIn: 3600,
		NoUnixSignals:   true,
		Redis: &config.RedisConfig{
			DelayedTasksKey:        delayed,
			NormalTasksPollPeriod:  100,
			DelayedTasksPollPeriod: 100,
		},
	}
}

// machineryRedis returns a machinery server on rs's Redis, as a machinery
// application makes one (broker and result backend on Redis).
func machineryRedis(rs *redisServer, cnf *config.Config) *machinery.Server {
	return machinery.NewServer(cnf,
		mbroker.NewGR(cnf, []string{rs.addr}, testDB),
		mbackend.NewGR(cnf, []string{rs.addr}, testDB),
		eager.New())
}

// errandOnMachineryRedis starts an errand worker on machinery's Redis
// queue, delayed set and result keys.
func errandOnMachineryRedis(t *testing.T, rs *redisServer, queue, delayed string, r *runs) {
	broker := redisbroker.NewMachinery(rs.client, &redisbroker.MachineryOptions{DefaultQueue: queue, DelayedTasksKey: delayed, Prefix: "errand-machinery-test"})
	backend := redisbackend.NewMachinery(rs.client, nil)
	errandWorker(t, broker, backend, queue, r)
}

// TestRedisMachineryProducerErrandWorkers: an unchanged machinery producer
// sends plain tasks, an ETA task, a chain, a group, a chord of 100 and a
// retried task onto machinery's Redis queue; errand workers alone run
// them, and machinery's AsyncResult reads every result from machinery's
// Redis result keys. Every task runs exactly once (the retried one four
// times).
func TestRedisMachineryProducerErrandWorkers(t *testing.T) {
	rs := newRedis(t)
	queue, delayed := unique("machinery-q"), unique("machinery-delayed")
	r := newRuns()
	errandOnMachineryRedis(t, rs, queue, delayed, r)
	want := scenario(t, machineryRedis(rs, machineryConfig(queue, delayed)), r, 100)
	r.exactlyOnce(t, want)
	if k := r.kinds(); k["machinery"] != 0 {
		t.Errorf("machinery workers ran %d tasks in a test without any", k["machinery"])
	}
}

// TestRedisMixedFleet: machinery and errand workers on one machinery queue
// at once, as in a rolling migration; the same workflows complete, every
// result is read by machinery's AsyncResult, and each task runs exactly
// once (machinery's BLPOP takes a task out of Redis before running it: a
// machinery worker that dies loses it, which this test does not do).
func TestRedisMixedFleet(t *testing.T) {
	rs := newRedis(t)
	queue, delayed := unique("machinery-mixed-q"), unique("machinery-mixed-delayed")
	r := newRuns()
	errandOnMachineryRedis(t, rs, queue, delayed, r)
	machineryWorker(t, machineryRedis(rs, machineryConfig(queue, delayed)), r)
	want := scenario(t, machineryRedis(rs, machineryConfig(queue, delayed)), r, 100)
	r.exactlyOnce(t, want)
	k := r.kinds()
	if k["errand"] == 0 || k["machinery"] == 0 {
		t.Errorf("runs by worker kind %v: a mixed fleet test needs both kinds to have run tasks", k)
	}
	t.Logf("runs by worker kind: %v", k)
}
