package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// protect wraps next in what every request passes: security headers, the
// Host check or authentication (see [Dashboard.Guard]), and for anything
// but GET and HEAD the read-only switch, net/http's CrossOriginProtection
// and the dashboard's own same-origin check.
func (d *Dashboard) protect(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	trusted := make(map[string]bool)
	for _, o := range d.opts.TrustedOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			d.log.Warn("web: ignoring a trusted origin", "origin", o, "err", err)
			continue
		}
		trusted[o] = true
	}
	refuse := func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusForbidden, "Cross-origin request refused",
			"This action came from another site (or a page the dashboard cannot tell is its own), so it was not carried out. Use the dashboard's own buttons.", nil)
	}
	cop.SetDenyHandler(http.HandlerFunc(refuse))
	guarded := cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r, trusted) {
			refuse(w, r)
			return
		}
		next.ServeHTTP(w, r)
	}))

	return d.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			next.ServeHTTP(w, r)
		default:
			if d.opts.ReadOnly {
				d.fail(w, r, http.StatusForbidden, "Read-only dashboard", "This dashboard is read-only: it shows queues and tasks but changes nothing.", nil)
				return
			}
			guarded.ServeHTTP(w, r)
		}
	}))
}

// Guard wraps next in the access rules of the dashboard's pages, for
// handlers served beside it (errand web guards /metrics with it): the
// security headers, then
//
//   - with [Options.Token] or [Options.Username] set, the credentials: a
//     request without valid ones gets 401 Unauthorized;
//   - with neither set, the Host check: the request's Host must be an IP
//     literal, localhost, or one of [Options.AllowedHosts], else it gets
//     421 Misdirected Request. A dashboard without credentials is only as
//     safe as the reach of its address, and DNS rebinding lets any web page
//     reach a loopback address under a name of its own (evil.example
//     resolving to 127.0.0.1): the browser then takes the page and the
//     dashboard for one origin, and the Host header is what tells them
//     apart.
//
// Guard checks no origin: wrap only handlers that change nothing.
func (d *Dashboard) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		if d.opts.Token == "" && d.opts.Username == "" {
			if !d.hostAllowed(r.Host) {
				d.fail(w, r, http.StatusMisdirectedRequest, "Unrecognised host name",
					"This dashboard has no credentials set, so it answers only requests addressed to an IP address, to localhost, or to a host name it was told to allow (Options.AllowedHosts, errand web --allowed-host): a page of another site can point its own host name at this address (DNS rebinding). Open the dashboard by its IP address or as localhost, allow this host name, or set credentials.", nil)
				return
			}
		} else if !d.authorized(r) {
			if d.opts.Username != "" {
				h.Set("WWW-Authenticate", `Basic realm="errand", charset="UTF-8"`)
			} else {
				h.Set("WWW-Authenticate", `Bearer realm="errand"`)
			}
			d.fail(w, r, http.StatusUnauthorized, "Authentication required", "Sign in to see the dashboard.", nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether hostport, a request's Host, is an IP
// literal, localhost, or one of Options.AllowedHosts, any port unless the
// allowed entry names one.
func (d *Dashboard) hostAllowed(hostport string) bool {
	hostport = strings.ToLower(hostport)
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
	if host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	for _, a := range d.opts.AllowedHosts {
		a = strings.ToLower(strings.TrimSpace(a))
		if a != "" && (a == host || a == hostport || strings.TrimSuffix(a, ".") == host) {
			return true
		}
	}
	return false
}

// authorized reports whether r carries the credentials Options asks for.
func (d *Dashboard) authorized(r *http.Request) bool {
	if d.opts.Token == "" && d.opts.Username == "" {
		return true
	}
	ok := false
	if d.opts.Token != "" {
		a := r.Header.Get("Authorization")
		if len(a) > 7 && strings.EqualFold(a[:7], "Bearer ") {
			ok = equal(strings.TrimSpace(a[7:]), d.opts.Token)
		}
	}
	if d.opts.Username != "" {
		if u, p, has := r.BasicAuth(); has {
			// Both compared, always: no early return on the user name.
			uok, pok := equal(u, d.opts.Username), equal(p, d.opts.Password)
			ok = ok || (uok && pok)
		}
	}
	return ok
}

// equal compares a and b in constant time, their lengths included (it
// compares their SHA-256 sums).
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// sameOrigin is the dashboard's own check on top of CrossOriginProtection:
// the Origin and Referer headers, when the browser sends them, must name
// the host the request was sent to (or a trusted origin), and
// Sec-Fetch-Site, when sent, must not say another site.
func sameOrigin(r *http.Request, trusted map[string]bool) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s == "cross-site" || s == "same-site" {
		return trusted[r.Header.Get("Origin")]
	}
	for _, h := range []string{"Origin", "Referer"} {
		v := r.Header.Get(h)
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || u.Host == "" {
			return false
		}
		if u.Host == r.Host || trusted[u.Scheme+"://"+u.Host] {
			continue
		}
		return false
	}
	return true
}
