package driver

import (
	"fmt"
	"net/url"
	"time"
)

// Result backends' expiry defaults.
const (
	DefaultResultExpiry = time.Hour      // machinery's ResultsExpireIn
	DefaultGroupExpiry  = 24 * time.Hour // after a group's last completion
)

// ExpiryDefaults fills a backend's result and group expiry with the
// defaults where they are not positive, and keeps the group expiry no
// shorter than the result expiry (a live group must outlive its results).
func ExpiryDefaults(result, group time.Duration) (time.Duration, time.Duration) {
	if result <= 0 {
		result = DefaultResultExpiry
	}
	if group <= 0 {
		group = DefaultGroupExpiry
	}
	return result, max(group, result)
}

// DurationParams reads positive durations from the query parameters named
// by dst's keys, leaving absent ones untouched; an error names the
// parameter. Drivers use it for URL options such as result_expiry.
func DurationParams(q url.Values, dst map[string]*time.Duration) error {
	for key, d := range dst {
		v := q.Get(key)
		if v == "" {
			continue
		}
		parsed, err := time.ParseDuration(v)
		if err != nil || parsed <= 0 {
			return fmt.Errorf("%s %q is not a positive duration", key, v)
		}
		*d = parsed
	}
	return nil
}
