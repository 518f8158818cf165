package redisconn

import (
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// States is where errand's Redis result backend keeps its task states:
// the value its Location method returns (driver.Located). errand's Redis
// broker co-locates with a backend whose location is a *States on its own
// server (SameServer), writing and reading the states there itself in the
// step of a publish, a fetch or an ack (driver.Colocator). The type is in
// this module, which both Redis drivers import, so that neither requires
// the other and the backend exports nothing for the broker; no other
// driver can declare it.
//
// The layout is the backend's, read here by the broker: a task's state is
// one string key, StateKey(id), holding its JSON (errand's
// internal/statejson encoding), with Expiry as its PX (0: none).
type States struct {
	Client goredis.UniversalClient
	Prefix string        // a task's state key is Prefix + ":task:" + its UUID
	Expiry time.Duration // each state's expiry (0: none)
}

// StatePrefix is the part of every state key before the task's UUID.
func (s *States) StatePrefix() string { return s.Prefix + ":task:" }

// StateKey is the key of task id's state.
func (s *States) StateKey(id string) string { return s.Prefix + ":task:" + id }
