package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
)

// protect wraps next in what every request passes: security headers,
// authentication, and for anything but GET and HEAD the read-only switch,
// net/http's CrossOriginProtection and the dashboard's own same-origin
// check.
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

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		if !d.authorized(r) {
			if d.opts.Username != "" {
				h.Set("WWW-Authenticate", `Basic realm="errand", charset="UTF-8"`)
			} else {
				h.Set("WWW-Authenticate", `Bearer realm="errand"`)
			}
			d.fail(w, r, http.StatusUnauthorized, "Authentication required", "Sign in to see the dashboard.", nil)
			return
		}
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
	})
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
