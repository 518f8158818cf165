package redisconn

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// TestSameServer: SameServer is true only for clients known to reach the
// same data (it decides whether errand's Redis broker may write a Redis
// backend's states in its own pipeline); no client here ever connects.
func TestSameServer(t *testing.T) {
	single := func(o goredis.Options) *goredis.Client {
		c := goredis.NewClient(&o)
		t.Cleanup(func() { c.Close() })
		return c
	}
	cluster := func(o goredis.ClusterOptions) *goredis.ClusterClient {
		c := goredis.NewClusterClient(&o)
		t.Cleanup(func() { c.Close() })
		return c
	}
	a := single(goredis.Options{Addr: "127.0.0.1:6379", DB: 2})
	c := cluster(goredis.ClusterOptions{Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}})
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:6379"}})
	t.Cleanup(func() { ring.Close() })
	ring2 := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:6379"}})
	t.Cleanup(func() { ring2.Close() })
	failover := func() *goredis.Client {
		f := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:26379"}})
		t.Cleanup(func() { f.Close() })
		return f
	}
	slots := func(context.Context) ([]goredis.ClusterSlot, error) { return nil, nil }

	cases := []struct {
		name string
		a, b goredis.UniversalClient
		want bool
	}{
		{"one client", a, a, true},
		{"equal single-node options", a, single(goredis.Options{Addr: "127.0.0.1:6379", DB: 2, PoolSize: 3}), true},
		{"another DB", a, single(goredis.Options{Addr: "127.0.0.1:6379", DB: 3}), false},
		{"another address", a, single(goredis.Options{Addr: "127.0.0.1:6380", DB: 2}), false},
		{"another user", a, single(goredis.Options{Addr: "127.0.0.1:6379", DB: 2, Username: "u"}), false},
		{"another network", single(goredis.Options{Addr: "/tmp/r.sock", Network: "unix"}), single(goredis.Options{Addr: "/tmp/r.sock", Network: "tcp"}), false},
		{"one cluster client", c, c, true},
		{"same seed addresses in another order", c, cluster(goredis.ClusterOptions{Addrs: []string{"10.0.0.3:7000", "10.0.0.1:7000", "10.0.0.2:7000"}}), true},
		{"other seed addresses", c, cluster(goredis.ClusterOptions{Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000"}}), false},
		{"cluster, another user", c, cluster(goredis.ClusterOptions{Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}, Username: "u"}), false},
		{"cluster with a custom slot source", cluster(goredis.ClusterOptions{Addrs: []string{"x:1"}, ClusterSlots: slots}), cluster(goredis.ClusterOptions{Addrs: []string{"x:1"}, ClusterSlots: slots}), false},
		{"single node and cluster", single(goredis.Options{Addr: "10.0.0.1:7000"}), cluster(goredis.ClusterOptions{Addrs: []string{"10.0.0.1:7000"}}), false},
		{"one ring", ring, ring, true},
		{"two rings on one address", ring, ring2, false},
		{"two failover clients of one master", failover(), failover(), false},
		{"nil", a, nil, false},
		{"nil, nil", nil, nil, false},
	}
	for _, tc := range cases {
		if got := SameServer(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: SameServer = %v; want %v", tc.name, got, tc.want)
		}
		if got := SameServer(tc.b, tc.a); got != tc.want {
			t.Errorf("%s (swapped): SameServer = %v; want %v (it must be symmetric)", tc.name, got, tc.want)
		}
	}
}
