package errand

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/errand-go/errand/internal/registry"
)

// OpenBroker opens a broker by URL, such as "redis://:secret@host:6379/0" or
// "memory://", database/sql style: the driver for the scheme must be
// imported (for its side effect, `import _ ".../brokers/redis"`). The
// broker it returns is the driver's own value (a *redisbroker.Broker for
// redis://), as its constructor would have made it: give it to
// Config.Broker, and close the Server (or, used alone, the broker) when
// done. Errors never contain the URL's secrets, and still satisfy
// errors.Is and errors.As for what the driver returned.
func OpenBroker(ctx context.Context, rawURL string) (Broker, error) {
	return openDriver[Broker](ctx, rawURL, "broker", registry.Brokers)
}

// OpenBackend opens a result backend by URL (see OpenBroker).
func OpenBackend(ctx context.Context, rawURL string) (Backend, error) {
	return openDriver[Backend](ctx, rawURL, "backend", registry.Backends)
}

// openDriver opens rawURL with the opener its scheme has among openers
// (D is Broker or Backend), wrapping a failure in an *OpenError.
func openDriver[D any](ctx context.Context, rawURL, kind string, openers *registry.Openers[any]) (D, error) {
	var none D
	u, err := parseDriverURL(rawURL)
	if err != nil {
		return none, err
	}
	open, ok := openers.Lookup(u.Scheme)
	if !ok {
		return none, fmt.Errorf("errand: no %s registered for scheme %q (import its driver; registered: %s)", kind, u.Scheme, openers.Schemes())
	}
	d, err := open.(func(context.Context, *url.URL) (D, error))(ctx, u)
	if err != nil {
		return none, &OpenError{Kind: kind, URL: RedactURL(rawURL), Err: err, secrets: secrets(u)}
	}
	return d, nil
}

// OpenError is why OpenBroker or OpenBackend failed. Its text shows the URL
// redacted and hides every secret of the URL wherever the driver's error
// repeats it; Unwrap returns the driver's error, so errors.Is and errors.As
// see through it (the unwrapped error's own text is the driver's, unredacted).
type OpenError struct {
	Kind string // "broker" or "backend"
	URL  string // the URL, redacted
	Err  error  // the driver's error

	secrets []string
}

func (e *OpenError) Error() string {
	msg := e.Err.Error()
	for _, s := range e.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return fmt.Sprintf("errand: open %s %s: %s", e.Kind, e.URL, msg)
}

// Unwrap returns the driver's error.
func (e *OpenError) Unwrap() error { return e.Err }

// secrets lists the URL's secret values, in every form a driver's error
// may repeat them (as given, and escaped for a query, a path or userinfo):
// its password, a username that may be a credential (see hideUser), and
// the values of secret-looking query parameters. Longest first, so no part
// of one is left.
func secrets(u *url.URL) []string {
	var raw []string
	if u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			raw = append(raw, p)
		}
		if n := u.User.Username(); n != "" && hideUser(u) {
			raw = append(raw, n)
		}
	}
	for k, vs := range u.Query() {
		if secretParam(k) {
			for _, v := range vs {
				if v != "" {
					raw = append(raw, v)
				}
			}
		}
	}
	var out []string
	for _, v := range raw {
		out = append(out, v, url.QueryEscape(v), url.PathEscape(v), url.User(v).String())
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// hideUser reports whether u's username may itself be a credential and is
// hidden: a username with no password (a token, or a password as some
// clients read it), and an SQS URL's (an AWS access key ID). A PostgreSQL
// URL's username is a role name, never a credential: its password comes
// from the URL, PGPASSWORD or a password file.
func hideUser(u *url.URL) bool {
	if u.User == nil || u.User.Username() == "" {
		return false
	}
	switch strings.ToLower(u.Scheme) {
	case "sqs":
		return true
	case "postgres", "postgresql":
		return false
	}
	_, hasPassword := u.User.Password()
	return !hasPassword
}

func parseDriverURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the input: say what is wrong without it.
		var ue *url.Error
		reason := err.Error()
		if errors.As(err, &ue) {
			reason = ue.Err.Error()
		}
		return nil, fmt.Errorf("errand: malformed driver URL %s: %s", RedactURL(raw), redactReason(reason, raw))
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("errand: driver URL %s has no scheme", RedactURL(raw))
	}
	return u, nil
}

// redactReason keeps a parse error's reason from quoting the URL's
// userinfo (everything between "://" and the last "@" before the path).
func redactReason(reason, raw string) string {
	rest, ok := strings.CutPrefix(raw[strings.Index(raw, ":")+1:], "//")
	if !ok {
		return reason
	}
	if at := strings.LastIndex(rest, "@"); at > 0 {
		if info := rest[:at]; info != "" {
			reason = strings.ReplaceAll(reason, info, "xxxxx")
		}
	}
	return reason
}

// secretWords mark query parameters whose values are hidden: any
// parameter whose name contains one, in any case (password, secret_key,
// aws_access_key_id, session_token, auth, sig, ...).
var secretWords = []string{"pass", "secret", "token", "key", "auth", "cred", "sig"}

func secretParam(k string) bool {
	k = strings.ToLower(k)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// RedactURL returns raw with its password, any secret-looking query
// parameter and a username that may be a credential (one without a
// password, or an SQS URL's access key ID) replaced by "xxxxx", for
// printing and logging. A string that does not parse as a URL is hidden
// whole after its scheme.
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
		if secretParam(k) {
			q.Set(k, "xxxxx")
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	if hideUser(u) {
		if p, ok := u.User.Password(); ok {
			u.User = url.UserPassword("xxxxx", p)
		} else {
			u.User = url.User("xxxxx")
		}
	}
	return u.Redacted()
}
