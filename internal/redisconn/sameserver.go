package redisconn

import (
	"reflect"
	"slices"

	goredis "github.com/redis/go-redis/v9"
)

// SameServer reports whether a and b are known to reach the same Redis
// data: the same client value; two *redis.Client with equal Network, Addr,
// DB and Username; or two *redis.ClusterClient with the same set of seed
// Addrs (in any order) and Username. Anything else is false, so that a
// caller never takes two stores for one: two different Ring or Sentinel
// failover clients (a failover client's Addr is go-redis's placeholder,
// not a server), a cluster
// with a custom slot source (ClusterOptions.ClusterSlots), clients of two
// kinds, or nil.
//
// errand's Redis broker asks it to decide whether a Redis backend keeps
// its states on the broker's own server, so that both can be written in
// one pipeline.
func SameServer(a, b goredis.UniversalClient) bool {
	if a == nil || b == nil {
		return false
	}
	if reflect.TypeOf(a).Comparable() && a == b {
		return true
	}
	switch a := a.(type) {
	case *goredis.Client:
		b, ok := b.(*goredis.Client)
		if !ok {
			return false
		}
		oa, ob := a.Options(), b.Options()
		if oa.Addr == failoverAddr || ob.Addr == failoverAddr {
			return false
		}
		return oa.Network == ob.Network && oa.Addr == ob.Addr && oa.DB == ob.DB && oa.Username == ob.Username
	case *goredis.ClusterClient:
		b, ok := b.(*goredis.ClusterClient)
		if !ok {
			return false
		}
		oa, ob := a.Options(), b.Options()
		if oa.ClusterSlots != nil || ob.ClusterSlots != nil || len(oa.Addrs) == 0 {
			return false
		}
		return oa.Username == ob.Username && sameSet(oa.Addrs, ob.Addrs)
	}
	return false
}

// failoverAddr is the Addr go-redis gives the options of a Sentinel
// failover client (redis.NewFailoverClient), whose dialer asks the
// sentinels for the master.
const failoverAddr = "FailoverClient"

// sameSet reports whether a and b hold the same strings, ignoring order
// and repeats.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
