package conformance

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// RunOpenRedaction opens each URL of urls with errand.OpenBroker (kind
// "broker") or errand.OpenBackend (kind "backend") and requires it to fail
// (give URLs that cannot open: a refused port, a bad option) within a few
// seconds, with an error that contains none of the URL's listed secrets and
// that unwraps to an *errand.OpenError. List every credential form the
// driver accepts: userinfo, query parameters, special characters that
// clients escape.
//
// The URLs open side by side: a failing open waits on its client's retries
// and timeouts (about a second for a refused port), not on the CPU.
func RunOpenRedaction(t *testing.T, kind string, urls map[string][]string) {
	t.Run("Open/Redacted", func(t *testing.T) {
		var wg sync.WaitGroup
		defer wg.Wait()
		for raw, secrets := range urls {
			wg.Go(func() { openRedacted(t, kind, raw, secrets) })
		}
	})
}

// openRedacted opens raw, which must fail, and reports the secrets its
// error or its redacted form shows.
func openRedacted(t *testing.T, kind, raw string, secrets []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second*time.Duration(scale()))
	var err error
	if kind == "broker" {
		var b errand.Broker
		if b, err = errand.OpenBroker(ctx, raw); err == nil {
			b.Close()
		}
	} else {
		var b errand.Backend
		if b, err = errand.OpenBackend(ctx, raw); err == nil {
			b.Close()
		}
	}
	cancel()
	shown := errand.RedactURL(raw)
	switch {
	case err == nil:
		t.Errorf("OpenBroker/OpenBackend(%s) succeeded; the redaction case needs a URL that fails to open", shown)
	case len(leaks(err.Error(), secrets)) > 0:
		t.Errorf("secrets promise broken: opening %s failed with an error showing %q: %v", shown, leaks(err.Error(), secrets), err)
	}
	if leaked := leaks(shown, secrets); len(leaked) > 0 {
		t.Errorf("secrets promise broken: errand.RedactURL shows %q in %s", leaked, shown)
	}
}

// leaks returns the secrets text contains.
func leaks(text string, secrets []string) []string {
	var out []string
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			out = append(out, s)
		}
	}
	return out
}
