package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	gomemcache "github.com/bradfitz/gomemcache/memcache"
	gomongo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/errand-go/errand"
	memcachebackend "github.com/errand-go/errand/backends/memcache"
	mongobackend "github.com/errand-go/errand/backends/mongo"
	redisbackend "github.com/errand-go/errand/backends/redis"
	redisbroker "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/driver"
)

// counting wraps a backend and counts its calls and the states written.
type counting struct {
	errand.Backend
	calls, states atomic.Int64
}

func (c *counting) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	c.calls.Add(1)
	c.states.Add(int64(len(sts)))
	return c.Backend.SetStates(ctx, sts)
}

func (c *counting) GetState(ctx context.Context, id string) (*errand.TaskState, error) {
	c.calls.Add(1)
	return c.Backend.GetState(ctx, id)
}

// Start counts one call, and the states each written request stored.
func (c *counting) Start(ctx context.Context, reqs []driver.StartRequest) []driver.StartResult {
	c.calls.Add(1)
	res := c.Backend.(driver.Starter).Start(ctx, reqs)
	for _, r := range res {
		if r.Err == nil && r.Written {
			c.states.Add(2)
		}
	}
	return res
}

func (c *counting) SetPendingIfAbsent(ctx context.Context, sts []*errand.TaskState) []error {
	c.calls.Add(1)
	c.states.Add(int64(len(sts)))
	return c.Backend.(driver.PendingWriter).SetPendingIfAbsent(ctx, sts)
}

// countingBackend returns c as an errand.Backend that has the optional
// capabilities of c's backend that errand's hot path uses.
func countingBackend(c *counting) errand.Backend {
	_, s := c.Backend.(driver.Starter)
	_, p := c.Backend.(driver.PendingWriter)
	if s && p {
		return c
	}
	return plainCounting{c}
}

// plainCounting hides Start and SetPendingIfAbsent of a counting wrapper
// whose backend has neither.
type plainCounting struct{ c *counting }

func (p plainCounting) SetStates(ctx context.Context, sts []*errand.TaskState) []error {
	return p.c.SetStates(ctx, sts)
}
func (p plainCounting) GetState(ctx context.Context, id string) (*errand.TaskState, error) {
	return p.c.GetState(ctx, id)
}
func (p plainCounting) InitGroup(ctx context.Context, g string, ids []string) error {
	return p.c.InitGroup(ctx, g, ids)
}
func (p plainCounting) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	return p.c.CompleteGroupMember(ctx, g, id)
}
func (p plainCounting) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	return p.c.ClaimChord(ctx, g, claimer)
}
func (p plainCounting) GroupStates(ctx context.Context, g string) ([]*errand.TaskState, error) {
	return p.c.GroupStates(ctx, g)
}
func (p plainCounting) Close() error { return p.c.Close() }

// backendDrains drains no-op tasks through the Redis broker with each result
// backend, and counts what each task costs the backend.
func backendDrains(r *report) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	type subject struct {
		name  string
		tasks int
		be    func() (errand.Backend, func(), error)
	}
	subjects := []subject{
		{"redis", *n, func() (errand.Backend, func(), error) {
			return redisbackend.New(r.rdb, &redisbackend.Options{Prefix: "bench-" + rand.Text()[:8]}), func() {}, nil
		}},
	}
	if addrs := os.Getenv("ERRAND_MEMCACHE_ADDRS"); addrs != "" {
		subjects = append(subjects, subject{"memcache", *n, func() (errand.Backend, func(), error) {
			mc := gomemcache.New(strings.Split(addrs, ",")...)
			mc.MaxIdleConns = 20
			return memcachebackend.New(mc, &memcachebackend.Options{Prefix: "bench-" + rand.Text()[:8]}), func() { mc.Close() }, nil
		}})
	}
	if uri := os.Getenv("ERRAND_MONGO_URI"); uri != "" {
		// FerretDB on SQLite with one connection is far slower than MongoDB:
		// a hundredth of the tasks keeps the run short.
		subjects = append(subjects, subject{"mongo (FerretDB, maxPoolSize=1)", *n / 100, func() (errand.Backend, func(), error) {
			c, err := gomongo.Connect(options.Client().ApplyURI(uri))
			if err != nil {
				return nil, nil, err
			}
			be, err := mongobackend.New(ctx, c, &mongobackend.Options{Database: "errand_bench", Prefix: "bench" + rand.Text()[:8]})
			return be, func() { c.Disconnect(context.Background()) }, err
		}})
	}
	for _, s := range subjects {
		be, done, err := s.be()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		cnt := &counting{Backend: be}
		srv, _ := errand.NewServer(errand.Config{Broker: redisbroker.New(r.rdb, &redisbroker.Options{Prefix: "bench-" + rand.Text()[:8]}), Backend: countingBackend(cnt)})
		d, err := errandDrain(ctx, srv, s.tasks, 10, func() {
			cnt.calls.Store(0)
			cnt.states.Store(0)
		})
		done()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		sc := fmt.Sprintf("drain %d no-op tasks, Redis broker, 10 workers, by result backend", s.tasks)
		r.add(sc, s.name+": throughput", rate(s.tasks, d), "tasks/s")
		// A first delivery: on a driver.Starter one Start (the redelivery
		// check and RECEIVED+STARTED) then SUCCESS; elsewhere one read,
		// RECEIVED+STARTED in one batched write, SUCCESS.
		r.add(sc, s.name+": backend calls per task", float64(cnt.calls.Load())/float64(s.tasks), "calls")
		r.add(sc, s.name+": states written per task", float64(cnt.states.Load())/float64(s.tasks), "states")
	}
	return nil
}
