// Package redisconn opens go-redis clients from redis:// and rediss:// URLs
// for errand's Redis broker and Redis result backend, which share one URL
// form. It is a module of its own so that neither Redis driver module
// requires the other.
package redisconn

import (
	"context"
	"fmt"
	"net/url"

	goredis "github.com/redis/go-redis/v9"
)

// Open makes a go-redis client for a redis:// or rediss:// URL and checks
// it answers within ctx: a cluster client when the URL names more than one
// address (?addr=host:port), else a single-node client. The query
// parameters named in own are errand's, not go-redis's: they are taken out
// first and returned. The client honours ctx deadlines
// (ContextTimeoutEnabled), so no call outlives its caller's deadline on a
// server that stopped answering. Errors may repeat the URL;
// errand.OpenBroker and errand.OpenBackend redact them.
func Open(ctx context.Context, u *url.URL, own ...string) (goredis.UniversalClient, url.Values, error) {
	q := u.Query()
	mine := url.Values{}
	for _, k := range own {
		if q.Has(k) {
			mine[k] = q[k]
			q.Del(k)
		}
	}
	clean := *u
	clean.RawQuery = q.Encode()
	var rdb goredis.UniversalClient
	if q.Has("addr") {
		co, err := goredis.ParseClusterURL(clean.String())
		if err != nil {
			return nil, nil, err
		}
		co.ContextTimeoutEnabled = true
		rdb = goredis.NewClusterClient(co)
	} else {
		o, err := goredis.ParseURL(clean.String())
		if err != nil {
			return nil, nil, err
		}
		o.ContextTimeoutEnabled = true
		rdb = goredis.NewClient(o)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("ping: %w", err)
	}
	return rdb, mine, nil
}
