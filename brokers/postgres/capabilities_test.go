package postgresbroker_test

import "github.com/errand-go/errand/conformance"

// withOpsCaps declares, on the caps of a harness, the broker's optional
// capabilities (archive.go, list.go, operate.go, pause.go, heartbeat.go,
// unique.go, ratelimit.go, schedule.go, concurrency.go): every one the kit knows, none
// skipped.
func withOpsCaps(c conformance.BrokerCaps) conformance.BrokerCaps {
	c.Purge, c.Stats, c.Archive, c.List, c.Queues = true, true, true, true, true
	c.Pause, c.Heartbeat, c.Find = true, true, true
	c.Unique, c.RateLimit, c.Schedules = true, true, true
	c.Concurrency = true
	return c
}
