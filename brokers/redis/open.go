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
	rdb, opts, err := client(u)
	if err != nil {
		return nil, err
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis broker: ping %s: %w", u.Redacted(), err)
	}
	return New(rdb, opts), nil
}

// client parses u into a go-redis client: a cluster client when the URL
// names more than one address (?addr=host:port), else a single-node client.
// errand's own query parameters (prefix, max_payload) are taken out first.
func client(u *url.URL) (goredis.UniversalClient, *Options, error) {
	opts := &Options{CloseClient: true}
	q := u.Query()
	opts.Prefix = q.Get("prefix")
	if v := q.Get("max_payload"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, nil, fmt.Errorf("redis broker: max_payload %q is not a byte count", v)
		}
		opts.MaxPayload = n
	}
	q.Del("prefix")
	q.Del("max_payload")
	clean := *u
	clean.RawQuery = q.Encode()
	if q.Has("addr") {
		co, err := goredis.ParseClusterURL(clean.String())
		if err != nil {
			return nil, nil, fmt.Errorf("redis broker: %s: %v", core.RedactURL(clean.String()), redactErr(err, u))
		}
		return goredis.NewClusterClient(co), opts, nil
	}
	o, err := goredis.ParseURL(clean.String())
	if err != nil {
		return nil, nil, fmt.Errorf("redis broker: %s: %v", core.RedactURL(clean.String()), redactErr(err, u))
	}
	return goredis.NewClient(o), opts, nil
}

// redactErr keeps a parse error from repeating the URL's password.
func redactErr(err error, u *url.URL) string {
	msg := err.Error()
	if p, ok := u.User.Password(); ok && p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return msg
}
