package errandconfig_test

import (
	"context"
	"testing"
	"time"

	"github.com/errand-go/errand"
	_ "github.com/errand-go/errand/backends/memory" // memory://
	_ "github.com/errand-go/errand/brokers/memory"  // memory://
	errandconfig "github.com/errand-go/errand/config"
)

// Settings from the environment open drivers by URL and run a worker.
func TestOpenRunsAWorker(t *testing.T) {
	env := map[string]string{"ERRAND_BROKER": "memory://", "ERRAND_BACKEND": "memory://", "ERRAND_DEFAULT_QUEUE": "jobs", "ERRAND_CONCURRENCY": "2"}
	s, err := errandconfig.Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := s.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := errand.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Register("add", func(a, b int) (int, error) { return a + b, nil })
	w := srv.NewWorker(s.WorkerConfig())
	w.Start()
	defer w.Shutdown(context.Background())
	r, err := srv.SendTask(ctx, errand.NewSignature("add", 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	var sum int
	if err := r.GetInto(ctx, &sum); err != nil || sum != 5 {
		t.Fatalf("a task on the configured default queue: %d, %v; want 5", sum, err)
	}
	if _, err := (&errandconfig.Settings{Broker: "memory://"}).Open(ctx); err == nil {
		t.Error("Open without a backend URL: no error")
	}
}
