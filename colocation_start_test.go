package errand

import (
	"slices"
	"testing"

	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

// TestStartableTasks: a carried fetch may start the registered tasks
// without a rate limit, in name order, and a task registered later joins
// them.
func TestStartableTasks(t *testing.T) {
	srv, err := NewServer(Config{Broker: memorybroker.New(nil), Backend: memorybackend.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	noop := func() error { return nil }
	for _, name := range []string{"b", "a"} {
		if err := srv.Register(name, noop); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Register("limited", noop, WithRateLimit(1, 1)); err != nil {
		t.Fatal(err)
	}
	if got := srv.startableTasks(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("startable tasks %v; want [a b] (a rate-limited task must not be recorded STARTED by a fetch)", got)
	}
	if err := srv.RegisterTasks(map[string]any{"c": noop}); err != nil {
		t.Fatal(err)
	}
	if got := srv.startableTasks(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after registering c: startable tasks %v; want [a b c]", got)
	}
}
