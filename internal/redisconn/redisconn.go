// Package redisconn opens go-redis clients from redis:// and rediss:// URLs
// for errand's Redis broker and Redis result backend, which share one URL
// form. It is a module of its own so that neither Redis driver module
// requires the other.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Open makes a go-redis client for a redis:// or rediss:// URL and checks
// it answers within ctx: a cluster client when the URL names more than one
// address (?addr=host:port), else a single-node client; a Sentinel
// failover client for redis-sentinel:// and rediss-sentinel:// (see
// SentinelSchemes). The query
// parameters named in own are errand's, not go-redis's: they are taken out
// first and returned. The client honours ctx deadlines
// (ContextTimeoutEnabled), so no call outlives its caller's deadline on a
// server that stopped answering. Its MaxRetries is go-redis's (3, or
// max_retries=): errand's drivers run every script through NoRetry, so
// only commands whose second run changes nothing are retried. Errors may
// repeat the URL; errand.OpenBroker and errand.OpenBackend redact them.
//
// # TLS
//
// A rediss:// URL connects over TLS, verifying the server's certificate
// against the system's roots (go-redis's default), for the URL's host name.
// tls_ca=PATH (a PEM file of one or more CA certificates; URL-escape the
// path) makes the client trust those CAs instead, for a server whose
// certificate a private CA signed. It is refused on redis://, where it
// would silently be ignored. go-redis's own skip_verify=true turns
// verification off; never use it outside tests.
func Open(ctx context.Context, u *url.URL, own ...string) (goredis.UniversalClient, url.Values, error) {
	Quiet()
	q := u.Query()
	caFile := q.Get("tls_ca")
	if q.Has("tls_ca") && caFile == "" {
		return nil, nil, errors.New("tls_ca is empty: it names a PEM file of CA certificates")
	}
	q.Del("tls_ca")
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
	if isSentinel(u.Scheme) {
		c, err := newFailoverClient(&clean, caFile)
		if err != nil {
			return nil, nil, err
		}
		rdb = c
	} else if q.Has("addr") {
		co, err := goredis.ParseClusterURL(clean.String())
		if err != nil {
			return nil, nil, err
		}
		co.ContextTimeoutEnabled = true
		if err := trustCA(co.TLSConfig, caFile); err != nil {
			return nil, nil, err
		}
		rdb = goredis.NewClusterClient(co)
	} else {
		o, err := goredis.ParseURL(clean.String())
		if err != nil {
			return nil, nil, err
		}
		o.ContextTimeoutEnabled = true
		if err := trustCA(o.TLSConfig, caFile); err != nil {
			return nil, nil, err
		}
		rdb = goredis.NewClient(o)
	}
	// The check is bounded like any call: by the caller's ctx and by the
	// URL's timeout= (the drivers' per-call timeout), 10s if absent.
	pingTimeout := 10 * time.Second
	if d, err := time.ParseDuration(mine.Get("timeout")); err == nil && d > 0 {
		pingTimeout = d
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("ping: %w", err)
	}
	return rdb, mine, nil
}

// trustCA makes c trust only the CA certificates in the PEM file caFile
// (none: c is left as it is).
func trustCA(c *tls.Config, caFile string) error {
	if caFile == "" {
		return nil
	}
	if c == nil {
		return fmt.Errorf("tls_ca=%s needs a rediss:// URL: redis:// does not use TLS", caFile)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("tls_ca: %s holds no PEM certificate", caFile)
	}
	c.RootCAs = pool
	return nil
}
