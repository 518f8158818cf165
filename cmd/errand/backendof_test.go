package main

import "testing"

// TestBackendOfSameServer: without --backend, the command keeps results
// where the broker's URL points for every scheme both Redis drivers open,
// Sentinel's included, and drops the broker-only max_payload.
func TestBackendOfSameServer(t *testing.T) {
	for _, c := range []struct{ broker, want string }{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"rediss://h:6380/1?max_payload=1024", "rediss://h:6380/1"},
		{"redis-sentinel://s1:26379,s2:26379/0?master=errand", "redis-sentinel://s1:26379,s2:26379/0?master=errand"},
		{"rediss-sentinel://s1:26379/0?master=errand&max_payload=5", "rediss-sentinel://s1:26379/0?master=errand"},
		{"memory://", "memory://"},
		{"postgres://app@db:5432/app?schema=jobs&max_payload=5", "postgres://app@db:5432/app?schema=jobs"},
		{"postgresql://app@db/app", "postgresql://app@db/app"},
		{"sqs://?region=x", ""},
	} {
		if got := backendOf(c.broker); got != c.want {
			t.Errorf("backendOf(%q) = %q, want %q (the default backend is the broker's own server where a backend driver opens its scheme)", c.broker, got, c.want)
		}
	}
}
