package redisconn

import (
	"context"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestSentinelURL: a redis-sentinel:// URL names the sentinels in its
// host, the master with master=, the master's credentials in its user
// info and the sentinels' in sentinel_username/sentinel_password (see
// SentinelSchemes); go-redis's own options pass through. No client here
// connects.
func TestSentinelURL(t *testing.T) {
	cases := []struct {
		url  string
		want goredis.FailoverOptions
		tls  bool
	}{
		{
			url:  "redis-sentinel://127.0.0.1:26381,127.0.0.1:26382,127.0.0.1:26383?master=errand",
			want: goredis.FailoverOptions{MasterName: "errand", SentinelAddrs: []string{"127.0.0.1:26381", "127.0.0.1:26382", "127.0.0.1:26383"}},
		},
		{
			url:  "redis-sentinel://alice:p%40ss@s1,s2:26000/3?master=m&dial_timeout=2s",
			want: goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:26379", "s2:26000"}, Username: "alice", Password: "p@ss", DB: 3, DialTimeout: 2 * time.Second},
		},
		{
			url:  "redis-sentinel://:secret@s1:26379/0?master=m&sentinel_password=spw",
			want: goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:26379"}, Password: "secret", SentinelPassword: "spw"},
		},
		{
			url:  "redis-sentinel://s1?master=m&sentinel_username=watcher&sentinel_password=spw",
			want: goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:26379"}, SentinelUsername: "watcher", SentinelPassword: "spw"},
		},
		{
			url:  "rediss-sentinel://s1,s2:26000?master=m",
			want: goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:26379", "s2:26000"}},
			tls:  true,
		},
		{
			url:  "rediss-sentinel://[::1]?master=m",
			want: goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"[::1]:26379"}},
			tls:  true,
		},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatalf("url.Parse(%s): %v", c.url, err)
		}
		fo, err := failoverOptions(u)
		if err != nil {
			t.Errorf("%s: %v; want it parsed", c.url, err)
			continue
		}
		got := goredis.FailoverOptions{
			MasterName: fo.MasterName, SentinelAddrs: fo.SentinelAddrs,
			Username: fo.Username, Password: fo.Password,
			SentinelUsername: fo.SentinelUsername, SentinelPassword: fo.SentinelPassword,
			DB: fo.DB, DialTimeout: fo.DialTimeout,
		}
		w := c.want
		if got.MasterName != w.MasterName || !slices.Equal(got.SentinelAddrs, w.SentinelAddrs) ||
			got.Username != w.Username || got.Password != w.Password ||
			got.SentinelUsername != w.SentinelUsername || got.SentinelPassword != w.SentinelPassword ||
			got.DB != w.DB || got.DialTimeout != w.DialTimeout {
			t.Errorf("%s:\n got %+v\nwant %+v", c.url, got, w)
		}
		if !fo.ContextTimeoutEnabled {
			t.Errorf("%s: ContextTimeoutEnabled is false; a URL-opened client must honour ctx deadlines", c.url)
		}
		if c.tls != (fo.TLSConfig != nil) {
			t.Errorf("%s: TLS config %v; want TLS %v", c.url, fo.TLSConfig, c.tls)
		}
		if fo.TLSConfig != nil && fo.TLSConfig.ServerName != "" {
			t.Errorf("%s: TLS ServerName %q; want empty, so each connection verifies the host it dials (the master moves)", c.url, fo.TLSConfig.ServerName)
		}
	}
}

// TestSentinelURLRefusals: a Sentinel URL that cannot mean what it says
// fails before any connection, saying why.
func TestSentinelURLRefusals(t *testing.T) {
	cases := []struct{ url, want string }{
		{"redis-sentinel://127.0.0.1:26379/0", "needs master=NAME"},
		{"redis-sentinel://127.0.0.1:26379/0?master=", "needs master=NAME"},
		{"redis-sentinel://127.0.0.1:26379/0?master_name=m", "use master=NAME"},
		{"redis-sentinel://127.0.0.1:26379/0?master=m&addr=127.0.0.1:26380", "list every sentinel in the host"},
		{"redis-sentinel://127.0.0.1:26379/0?master=m&password=x", "user info"},
		{"redis-sentinel://127.0.0.1:26379,,127.0.0.1:26380/0?master=m", "empty sentinel address"},
		{"redis-sentinel://127.0.0.1:26379/0?master=m&sentinel_username=u", "sentinel_username needs sentinel_password"},
		{"redis-sentinel://127.0.0.1:26379/0?master=m&bogus=1", "unexpected option"},
		{"redis-sentinel://127.0.0.1:26379/0?master=m&tls_ca=%2Ftmp%2Fca.pem", "needs a rediss-sentinel:// URL"},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = Open(context.Background(), u)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): error %v; want one saying %q", c.url, err, c.want)
		}
	}
}

// TestSentinelClientNeverSameServer: two clients opened from one Sentinel
// URL, or one of them and a client of the master's own address, are never
// taken for one store (SameServer), since each follows the master on its
// own through a failover; one such client value is itself.
func TestSentinelClientNeverSameServer(t *testing.T) {
	u, err := url.Parse("redis-sentinel://127.0.0.1:26381,127.0.0.1:26382?master=errand")
	if err != nil {
		t.Fatal(err)
	}
	open := func() *goredis.Client {
		c, err := newFailoverClient(u, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := open(), open()
	plain := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:16381"})
	t.Cleanup(func() { plain.Close() })
	if SameServer(a, b) {
		t.Error("SameServer(two failover clients of one URL) = true; want false: a failover client's server is not known")
	}
	if SameServer(a, plain) || SameServer(plain, a) {
		t.Error("SameServer(failover client, client of the master's address) = true; want false")
	}
	if !SameServer(a, a) {
		t.Error("SameServer(one failover client, itself) = false; want true")
	}
}

// TestSentinelOpen: Open reaches the master through the sentinels of
// ERRAND_REDIS_SENTINEL_ADDRS and writes to it. Skips without them, fails
// under ERRAND_REQUIRE_SERVICES=1.
func TestSentinelOpen(t *testing.T) {
	addrs, master := os.Getenv("ERRAND_REDIS_SENTINEL_ADDRS"), os.Getenv("ERRAND_REDIS_SENTINEL_MASTER")
	if addrs == "" || master == "" {
		why := "ERRAND_REDIS_SENTINEL_ADDRS and ERRAND_REDIS_SENTINEL_MASTER unset (scripts/services start sets them)"
		if os.Getenv("ERRAND_REQUIRE_SERVICES") == "1" {
			t.Fatal("required service unavailable (ERRAND_REQUIRE_SERVICES=1): " + why)
		}
		t.Skip("skipping: " + why)
	}
	u, err := url.Parse("redis-sentinel://" + addrs + "/0?master=" + url.QueryEscape(master) + "&prefix=p")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, own, err := Open(ctx, u, "prefix")
	if err != nil {
		t.Fatalf("Open(%s): %v; want a failover client that reached the master", u, err)
	}
	defer rdb.Close()
	if own.Get("prefix") != "p" {
		t.Errorf("own parameters %v; want prefix=p taken out", own)
	}
	if _, ok := rdb.(*goredis.Client); !ok {
		t.Fatalf("Open gave a %T; want go-redis's failover *Client", rdb)
	}
	role, err := rdb.Do(ctx, "ROLE").Slice()
	if err != nil || len(role) == 0 || role[0] != "master" {
		t.Fatalf("ROLE through the failover client: %v, %v; want the master", role, err)
	}
	key := "errand-test:sentinel-open:" + t.Name()
	if err := rdb.Set(ctx, key, "1", time.Minute).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}
}
