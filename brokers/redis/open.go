package redis

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/core"
)

func init() {
	core.RegisterBroker("redis", Open)
	core.RegisterBroker("rediss", Open)
}

// Open returns a broker for a redis:// or rediss:// URL (see the package
// doc). The broker owns the client it makes and closes it on Close.
func Open(ctx context.Context, u *url.URL) (core.Broker, error) {
	rdb, own, err := ClientFromURL(ctx, u, "prefix", "max_payload")
	if err != nil {
		return nil, fmt.Errorf("redis broker: %w", err)
	}
	opts := &Options{CloseClient: true, Prefix: own.Get("prefix")}
	if v := own.Get("max_payload"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			rdb.Close()
			return nil, fmt.Errorf("redis broker: max_payload %q is not a byte count", v)
		}
		opts.MaxPayload = n
	}
	return New(rdb, opts), nil
}

// ClientFromURL makes a go-redis client for a redis:// or rediss:// URL and
// checks it answers: a cluster client when the URL names more than one
// address (?addr=host:port), else a single-node client. The query
// parameters named in own are errand's, not go-redis's: they are taken out
// first and returned. Errors never contain the URL's password. The result
// backend shares this parsing.
func ClientFromURL(ctx context.Context, u *url.URL, own ...string) (goredis.UniversalClient, url.Values, error) {
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
			return nil, nil, fmt.Errorf("%s: %s", core.RedactURL(clean.String()), redactErr(err, u))
		}
		rdb = goredis.NewClusterClient(co)
	} else {
		o, err := goredis.ParseURL(clean.String())
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %s", core.RedactURL(clean.String()), redactErr(err, u))
		}
		rdb = goredis.NewClient(o)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("ping %s: %s", u.Redacted(), redactErr(err, u))
	}
	return rdb, mine, nil
}

// redactErr keeps an error from repeating the URL's password.
func redactErr(err error, u *url.URL) string {
	msg := err.Error()
	if p, ok := u.User.Password(); ok && p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return msg
}
