package redisconn

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// SentinelSchemes are the URL schemes of a Redis deployment watched by
// Redis Sentinel, which Open serves with a go-redis failover client
// (redis.NewFailoverClient): redis-sentinel, and rediss-sentinel over TLS.
// The form is asynq's (ParseRedisURI), with the master's credentials where
// redis:// has them:
//
//	redis-sentinel://[user:password@]host1:port[,host2:port...][/db]?master=NAME
//
// The host list names the sentinels, not the Redis servers: the client
// asks them for the master of NAME (master=, required) and follows it
// through a failover. Give each sentinel its port: 26379 is assumed for
// one without, but Go's URL parser refuses a list whose last address has
// none, and takes an IPv6 literal ([::1]:26379) only as the sole sentinel. The user and password are
// the master's (its ACL user or requirepass), as in a redis:// URL.
// Sentinels that require a password of their own take
// sentinel_password=PASSWORD (and sentinel_username=USER for an ACL user);
// without it they are asked without authenticating. The path's database
// number and go-redis's own URL options (dial_timeout=, read_timeout=,
// pool_size=, ...) work as in a redis:// URL.
//
// rediss-sentinel:// speaks TLS to the sentinels and to the servers, each
// connection verifying the certificate of the host it dials (go-redis
// would verify every server for the first sentinel's host name);
// tls_ca=PATH trusts only the CAs in that PEM file, as on rediss://.
//
// A failover client never counts as the same server as another client
// (SameServer): the servers it reaches change with each failover.
var SentinelSchemes = []string{"redis-sentinel", "rediss-sentinel"}

// defaultSentinelPort is Redis Sentinel's port, for a host given without one.
const defaultSentinelPort = "26379"

// isSentinel reports whether scheme is one of SentinelSchemes.
func isSentinel(scheme string) bool {
	for _, s := range SentinelSchemes {
		if scheme == s {
			return true
		}
	}
	return false
}

// newFailoverClient makes the failover client of a Sentinel URL u (see
// SentinelSchemes) whose errand parameters and tls_ca are already taken
// out; caFile is tls_ca's value ("" for none). The client honours ctx
// deadlines (ContextTimeoutEnabled), like Open's others. It does not dial.
func newFailoverClient(u *url.URL, caFile string) (*goredis.Client, error) {
	fo, err := failoverOptions(u)
	if err != nil {
		return nil, err
	}
	if caFile != "" && fo.TLSConfig == nil {
		return nil, fmt.Errorf("tls_ca=%s needs a rediss-sentinel:// URL: redis-sentinel:// does not use TLS", caFile)
	}
	if err := trustCA(fo.TLSConfig, caFile); err != nil {
		return nil, err
	}
	return goredis.NewFailoverClient(fo), nil
}

// failoverOptions parses a Sentinel URL u (see SentinelSchemes) into
// go-redis's FailoverOptions, by rewriting it into the form of go-redis's
// own ParseFailoverURL (the first sentinel as host, the others as addr=,
// the master's credentials as username= and password=, the sentinels' as
// the user info), so that every option of go-redis's is read as it reads
// it.
func failoverOptions(u *url.URL) (*goredis.FailoverOptions, error) {
	q := u.Query()
	for _, k := range []string{"master_name", "addr", "username", "password"} {
		if q.Has(k) {
			return nil, fmt.Errorf("%s:// does not take %s= (%s)", u.Scheme, k, sentinelHint[k])
		}
	}
	master := q.Get("master")
	if master == "" {
		return nil, fmt.Errorf("%s:// needs master=NAME: the name the sentinels know the master by", u.Scheme)
	}
	q.Del("master")
	q.Set("master_name", master)

	var sentinels []string
	for h := range strings.SplitSeq(u.Host, ",") {
		if h == "" {
			return nil, fmt.Errorf("%s:// lists an empty sentinel address", u.Scheme)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = h, defaultSentinelPort
			if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
				return nil, fmt.Errorf("sentinel address %q is not host:port", h)
			}
			host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		}
		if host == "" || port == "" {
			return nil, fmt.Errorf("sentinel address %q is not host:port", h)
		}
		sentinels = append(sentinels, net.JoinHostPort(host, port))
	}
	if len(sentinels) == 0 {
		return nil, fmt.Errorf("%s:// names no sentinel: list them as host1:port,host2:port", u.Scheme)
	}
	for _, a := range sentinels[1:] {
		q.Add("addr", a)
	}

	if u.User != nil {
		if n := u.User.Username(); n != "" {
			q.Set("username", n)
		}
		if p, ok := u.User.Password(); ok {
			q.Set("password", p)
		}
	}
	var sentinelUser *url.Userinfo
	su, sp := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	switch {
	case su != "" && sp == "":
		return nil, errors.New("sentinel_username needs sentinel_password")
	case sp != "":
		sentinelUser = url.UserPassword(su, sp)
	}

	scheme := strings.TrimSuffix(u.Scheme, "-sentinel")
	g := url.URL{Scheme: scheme, User: sentinelUser, Host: sentinels[0], Path: u.Path, RawQuery: q.Encode()}
	fo, err := goredis.ParseFailoverURL(g.String())
	if err != nil {
		return nil, err
	}
	fo.ContextTimeoutEnabled = true
	if fo.TLSConfig != nil {
		// go-redis names the first sentinel's host; an empty name makes
		// each TLS dial verify the host it dials (tls.DialWithDialer).
		fo.TLSConfig.ServerName = ""
	}
	return fo, nil
}

// sentinelHint says where a Sentinel URL takes what a refused parameter
// would have said.
var sentinelHint = map[string]string{
	"master_name": "go-redis's name for it: use master=NAME",
	"addr":        "list every sentinel in the host: host1:port,host2:port",
	"username":    "the master's user goes in the URL's user info: USER:PASSWORD@",
	"password":    "the master's password goes in the URL's user info: :PASSWORD@ or USER:PASSWORD@",
}
