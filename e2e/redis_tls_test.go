package e2e_test

// Issue 14: Redis over TLS with an ACL user, tested on a real server, not
// only parsed. The test makes a throwaway CA and a server certificate for
// 127.0.0.1 with crypto/x509 (no openssl), starts a private TLS-only
// redis-server whose default user is off, and opens errand's Redis broker
// and backend by URL with tls_ca= naming the CA.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand"
	_ "github.com/errand-go/errand/backends/redis"
	_ "github.com/errand-go/errand/brokers/redis"
	"github.com/errand-go/errand/conformance"
)

const (
	tlsUser     = "alice"
	tlsPassword = "s3cret-Pw-7f3a"
	badPassword = "not-the-Pw-91c4" // must never appear in an error
)

// throwawayCA writes ca.pem, server.pem and server.key into dir: a CA made
// for this test and a certificate it signed for 127.0.0.1. It returns the
// CA's pool too.
func throwawayCA(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "errand test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	write("server.pem", "CERTIFICATE", srvDER)
	write("server.key", "PRIVATE KEY", keyDER)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool
}

// tlsRedis starts a private redis-server that listens only with TLS (port
// 0) and whose only user is tlsUser, and returns its address and the CA
// file that signed its certificate.
func tlsRedis(t *testing.T) (addr, caFile string) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		conformance.ServiceUnavailable(t, "redis-server not installed (scripts/services start installs it)")
	}
	dir := t.TempDir()
	pool := throwawayCA(t, dir)
	addr = conformance.FreeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	rdb := goredis.NewClient(&goredis.Options{
		Addr: addr, Username: tlsUser, Password: tlsPassword,
		TLSConfig: &tls.Config{RootCAs: pool, ServerName: host},
	})
	t.Cleanup(func() { rdb.Close() })
	conformance.StartServerProcess(t, func() *exec.Cmd {
		return exec.Command(bin, "--port", "0", "--tls-port", port, "--bind", host,
			"--tls-cert-file", filepath.Join(dir, "server.pem"),
			"--tls-key-file", filepath.Join(dir, "server.key"),
			"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
			"--tls-auth-clients", "no",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--user", "default", "off",
			"--user", tlsUser, "on", ">"+tlsPassword, "~*", "&*", "+@all")
	}, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
	return addr, filepath.Join(dir, "ca.pem")
}

func redissURL(user, password, addr, caFile, query string) string {
	u := url.URL{Scheme: "rediss", User: url.UserPassword(user, password), Host: addr, Path: "/0"}
	q := "tls_ca=" + url.QueryEscape(caFile)
	if query != "" {
		q += "&" + query
	}
	u.RawQuery = q
	return u.String()
}

// TestRedisTLSWithACLUser runs a task end to end with both the broker and
// the result backend on a TLS-only Redis, logged in as an ACL user.
func TestRedisTLSWithACLUser(t *testing.T) {
	t.Parallel()
	addr, caFile := tlsRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	raw := redissURL(tlsUser, tlsPassword, addr, caFile, "prefix=errand-tls")
	broker, err := errand.OpenBroker(ctx, raw)
	if err != nil {
		t.Fatalf("TLS + ACL: OpenBroker on rediss:// as %s with tls_ca naming the server's CA: %v; want a broker", tlsUser, err)
	}
	backend, err := errand.OpenBackend(ctx, raw)
	if err != nil {
		t.Fatalf("TLS + ACL: OpenBackend on rediss:// as %s with tls_ca naming the server's CA: %v; want a backend", tlsUser, err)
	}
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Register("greet", func(name string) (string, error) { return "hello " + name, nil }); err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 2})
	w.Start()
	defer w.Shutdown(context.Background())

	r, err := srv.SendTask(ctx, errand.NewSignature("greet", "tls"))
	if err != nil {
		t.Fatalf("TLS + ACL: SendTask: %v", err)
	}
	var got string
	if err := r.GetInto(ctx, &got); err != nil {
		t.Fatalf("TLS + ACL: the task's result over TLS: %v; want its result", err)
	}
	if got != "hello tls" {
		t.Fatalf("TLS + ACL: result %q, want %q", got, "hello tls")
	}
}

// TestRedisTLSRefusals: a wrong password, a CA the server's certificate
// does not chain to, and tls_ca on a plain redis:// URL each fail at open
// with a clear error that never repeats the password.
func TestRedisTLSRefusals(t *testing.T) {
	t.Parallel()
	addr, caFile := tlsRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type opener struct {
		name string
		open func(context.Context, string) error
	}
	openers := []opener{
		{"OpenBroker", func(ctx context.Context, raw string) error {
			b, err := errand.OpenBroker(ctx, raw)
			closeIf(b, err)
			return err
		}},
		{"OpenBackend", func(ctx context.Context, raw string) error {
			b, err := errand.OpenBackend(ctx, raw)
			closeIf(b, err)
			return err
		}},
	}
	otherCA := t.TempDir()
	throwawayCA(t, otherCA)
	cases := []struct {
		name, url, want, why string
	}{
		{"wrong password", redissURL(tlsUser, badPassword, addr, caFile, ""), "WRONGPASS",
			"a wrong password must fail with Redis's WRONGPASS"},
		{"unknown CA", redissURL(tlsUser, tlsPassword, addr, filepath.Join(otherCA, "ca.pem"), ""), "certificate",
			"a server certificate that does not chain to tls_ca must be refused"},
		{"tls_ca on redis://", "redis://" + tlsUser + ":" + badPassword + "@" + addr + "/0?tls_ca=" + url.QueryEscape(caFile), "needs a rediss:// URL",
			"tls_ca on a URL without TLS must be refused, not ignored"},
	}
	for _, c := range cases {
		for _, o := range openers {
			t.Run(c.name+"/"+o.name, func(t *testing.T) {
				err := o.open(ctx, c.url)
				if err == nil {
					t.Fatalf("%s: opened; want an error (%s)", o.name, c.why)
				}
				msg := err.Error()
				if !strings.Contains(msg, c.want) {
					t.Errorf("%s: error %q does not say %q (%s)", o.name, msg, c.want, c.why)
				}
				for _, secret := range []string{badPassword, tlsPassword} {
					if strings.Contains(msg, secret) {
						t.Errorf("%s: error %q contains the password: secrets in URLs are never printed", o.name, msg)
					}
				}
			})
		}
	}
}

func closeIf(c interface{ Close() error }, err error) {
	if err == nil {
		c.Close()
	}
}
