package redisconn

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTLSCARefusals: a tls_ca that cannot be used fails at once, before any
// connection, saying why (port 1: nothing listens, so a dial would fail
// differently).
func TestTLSCARefusals(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ url, want string }{
		{"rediss://127.0.0.1:1/0?tls_ca=", "tls_ca is empty"},
		{"rediss://127.0.0.1:1/0?tls_ca=" + url.QueryEscape(filepath.Join(dir, "missing.pem")), "no such file"},
		{"rediss://127.0.0.1:1/0?tls_ca=" + url.QueryEscape(notPEM), "holds no PEM certificate"},
		{"redis://127.0.0.1:1/0?tls_ca=" + url.QueryEscape(notPEM), "needs a rediss:// URL"},
		{"rediss://127.0.0.1:1?addr=127.0.0.1:2&tls_ca=" + url.QueryEscape(notPEM), "holds no PEM certificate"},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = Open(context.Background(), u)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): error %v; want one saying %q (a tls_ca that cannot be used is refused, never ignored)", c.url, err, c.want)
		}
	}
}
