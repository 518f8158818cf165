package mongobackend_test

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	gomongo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/errand-go/errand"
	mongobackend "github.com/errand-go/errand/backends/mongo"
	"github.com/errand-go/errand/conformance"
)

// TestSilentServer: with the server accepting connections but never
// answering (a stalled proxy in front of FerretDB), every backend call and
// OpenBackend return an error by the caller's ctx deadline, or within
// Options.CallTimeout without one (issue 14, item 3: OpenBackend used to
// return up to 60s after a ctx that ended at 40s, because the disconnect
// after the failed ping waited without it).
func TestSilentServer(t *testing.T) {
	client(t) // skips or fails when the server is unreachable
	u, err := url.Parse(os.Getenv("ERRAND_MONGO_URI"))
	if err != nil {
		t.Fatal(err)
	}
	const callTimeout = 3 * time.Second
	withHost := func(addr string) *url.URL {
		v := *u
		v.Host = addr
		return &v
	}
	conformance.RunSilentServer(t, conformance.SilentHarness{
		Target: u.Host,
		Backend: func(t testing.TB, addr string) errand.Backend {
			c, err := gomongo.Connect(options.Client().ApplyURI(withHost(addr).String()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c.Disconnect(ctx)
			})
			b, err := mongobackend.New(context.Background(), c, &mongobackend.Options{Database: "errand_test", CallTimeout: callTimeout})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		BackendURL: func(addr string) string {
			v := withHost(addr)
			v.Path = "/errand_test"
			q := v.Query()
			q.Set("timeout", callTimeout.String())
			v.RawQuery = q.Encode()
			return strings.Replace(v.String(), "%2F", "/", -1)
		},
		CallTimeout: callTimeout,
	})
}
