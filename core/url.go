package core

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// BrokerOpener opens a broker from a parsed URL.
type BrokerOpener func(ctx context.Context, u *url.URL) (Broker, error)

// BackendOpener opens a backend from a parsed URL.
type BackendOpener func(ctx context.Context, u *url.URL) (Backend, error)

var (
	openersMu      sync.RWMutex
	brokerOpeners  = map[string]BrokerOpener{}
	backendOpeners = map[string]BackendOpener{}
)

// RegisterBroker makes a broker available by URL scheme, database/sql
// style: a driver calls it from its init function, so importing the driver
// is enough. It panics if the scheme is registered twice.
func RegisterBroker(scheme string, open BrokerOpener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	if _, dup := brokerOpeners[scheme]; dup {
		panic("errand: RegisterBroker called twice for scheme " + scheme)
	}
	brokerOpeners[scheme] = open
}

// RegisterBackend makes a backend available by URL scheme (see
// RegisterBroker).
func RegisterBackend(scheme string, open BackendOpener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	if _, dup := backendOpeners[scheme]; dup {
		panic("errand: RegisterBackend called twice for scheme " + scheme)
	}
	backendOpeners[scheme] = open
}

// OpenBroker opens a broker by URL, such as "redis://:secret@host:6379/0" or
// "memory://". The driver for the scheme must be imported. Errors never
// contain the URL's password.
func OpenBroker(ctx context.Context, rawURL string) (Broker, error) {
	u, err := parseDriverURL(rawURL)
	if err != nil {
		return nil, err
	}
	openersMu.RLock()
	open := brokerOpeners[u.Scheme]
	openersMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("errand: no broker registered for scheme %q (import its driver; registered: %s)", u.Scheme, schemes(brokerOpeners))
	}
	b, err := open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("errand: open broker %s: %w", u.Redacted(), err)
	}
	return b, nil
}

// OpenBackend opens a result backend by URL (see OpenBroker).
func OpenBackend(ctx context.Context, rawURL string) (Backend, error) {
	u, err := parseDriverURL(rawURL)
	if err != nil {
		return nil, err
	}
	openersMu.RLock()
	open := backendOpeners[u.Scheme]
	openersMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("errand: no backend registered for scheme %q (import its driver; registered: %s)", u.Scheme, schemes(backendOpeners))
	}
	b, err := open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("errand: open backend %s: %w", u.Redacted(), err)
	}
	return b, nil
}

func parseDriverURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the input: say what is wrong without it.
		return nil, fmt.Errorf("errand: malformed driver URL %s", RedactURL(raw))
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("errand: driver URL %s has no scheme", RedactURL(raw))
	}
	return u, nil
}

func schemes[T any](m map[string]T) string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// secretParams are query parameters whose values RedactURL hides.
var secretParams = []string{"password", "secret", "token", "key", "access_key", "secret_key", "aws_secret_access_key", "session_token", "auth"}

// RedactURL returns raw with its password and any secret-looking query
// parameter replaced by "xxxxx", for printing and logging. A string that
// does not parse as a URL is hidden whole after its scheme.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.Index(raw, "://"); i >= 0 {
			return raw[:i+3] + "xxxxx"
		}
		return "xxxxx"
	}
	q := u.Query()
	changed := false
	for k := range q {
		for _, s := range secretParams {
			if strings.EqualFold(k, s) {
				q.Set(k, "xxxxx")
				changed = true
			}
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
