package errandconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/errand-go/errand"
)

// Settings is errand's own configuration: the drivers by URL, the default
// queue and a worker's settings. Read it with Load (a YAML file, then
// environment variables over it) or FromMachinery (a machinery config).
// Every field is optional in the file; a zero value leaves errand's
// default.
type Settings struct {
	// Broker is the broker's URL (errand.OpenBroker). YAML broker,
	// env ERRAND_BROKER. Default: none; Open requires it.
	Broker string `yaml:"broker"`
	// Backend is the result backend's URL (errand.OpenBackend). YAML
	// backend, env ERRAND_BACKEND. Default: none; Open requires it.
	Backend string `yaml:"backend"`
	// DefaultQueue is errand.Config.DefaultQueue. YAML default_queue, env
	// ERRAND_DEFAULT_QUEUE. Default: "errand_tasks" (errand.DefaultQueue;
	// FromMachinery: machinery's "machinery_tasks").
	DefaultQueue string `yaml:"default_queue"`
	// Worker holds errand.WorkerConfig's settings. YAML worker. Default:
	// each field's own default, below.
	Worker Worker `yaml:"worker"`
}

// Worker is the part of errand.WorkerConfig a file or the environment sets.
type Worker struct {
	// Queues maps queue names to weights (WorkerConfig.Queues). YAML
	// worker.queues (a map), env ERRAND_QUEUES ("a:3,b:1"; a name alone
	// weighs 1). Default: the default queue alone.
	Queues map[string]int `yaml:"queues"`
	// Concurrency (WorkerConfig.Concurrency). YAML worker.concurrency,
	// env ERRAND_CONCURRENCY. Default: 10.
	Concurrency int `yaml:"concurrency"`
	// Lease (WorkerConfig.Lease). YAML worker.lease, env ERRAND_LEASE (a
	// Go duration: "30s"). Default: 30s (FromMachinery: SQS's
	// receive_visibility_timeout when machinery's config sets one).
	Lease Duration `yaml:"lease"`
	// TaskTimeout (WorkerConfig.TaskTimeout). YAML worker.task_timeout,
	// env ERRAND_TASK_TIMEOUT. Default: none (a task runs until it
	// returns, unless its Signature sets a Timeout).
	TaskTimeout Duration `yaml:"task_timeout"`
	// ShutdownTimeout (WorkerConfig.ShutdownTimeout). YAML
	// worker.shutdown_timeout, env ERRAND_SHUTDOWN_TIMEOUT. Default: 30s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// MaxRetries (WorkerConfig.MaxRetries). YAML worker.max_retries, env
	// ERRAND_MAX_RETRIES. Default (0): 100; negative: no retries.
	MaxRetries int `yaml:"max_retries"`
	// UnknownTaskAttempts (WorkerConfig.UnknownTaskAttempts). YAML
	// worker.unknown_task_attempts, env ERRAND_UNKNOWN_TASK_ATTEMPTS.
	// Default: 10.
	UnknownTaskAttempts int `yaml:"unknown_task_attempts"`
}

// Duration is a time.Duration written as Go writes one ("1m30s") in YAML
// and environment variables; a bare number is seconds.
type Duration time.Duration

// UnmarshalYAML reads "1m30s" or a number of seconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (\"30s\", \"1m30s\" or a number of seconds)", s)
	}
	return v, nil
}

// Env looks an environment variable up; os.LookupEnv is one.
type Env func(name string) (string, bool)

// Load reads errand's configuration: the YAML file at path (none if path
// is empty), then every ERRAND_* variable env has over it (os.LookupEnv
// when env is nil). Unknown YAML keys are an error, so a misspelt key is
// never silently ignored.
func Load(path string, env Env) (*Settings, error) {
	if env == nil {
		env = os.LookupEnv
	}
	s := &Settings{}
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("errandconfig: %w", err)
		}
		if err := decodeStrict(raw, s); err != nil {
			return nil, fmt.Errorf("errandconfig: %s: %w", path, err)
		}
	}
	if err := s.applyEnv(env); err != nil {
		return nil, err
	}
	return s, nil
}

func decodeStrict(raw []byte, v any) error {
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file
		return err
	}
	return nil
}

// applyEnv sets every field whose ERRAND_* variable env has.
func (s *Settings) applyEnv(env Env) error {
	str := map[string]*string{"ERRAND_BROKER": &s.Broker, "ERRAND_BACKEND": &s.Backend, "ERRAND_DEFAULT_QUEUE": &s.DefaultQueue}
	for name, p := range str {
		if v, ok := env(name); ok {
			*p = v
		}
	}
	ints := map[string]*int{"ERRAND_CONCURRENCY": &s.Worker.Concurrency, "ERRAND_MAX_RETRIES": &s.Worker.MaxRetries, "ERRAND_UNKNOWN_TASK_ATTEMPTS": &s.Worker.UnknownTaskAttempts}
	for name, p := range ints {
		if v, ok := env(name); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("errandconfig: %s=%q is not a whole number", name, v)
			}
			*p = n
		}
	}
	durs := map[string]*Duration{"ERRAND_LEASE": &s.Worker.Lease, "ERRAND_TASK_TIMEOUT": &s.Worker.TaskTimeout, "ERRAND_SHUTDOWN_TIMEOUT": &s.Worker.ShutdownTimeout}
	for name, p := range durs {
		if v, ok := env(name); ok {
			d, err := parseDuration(v)
			if err != nil {
				return fmt.Errorf("errandconfig: %s: %w", name, err)
			}
			*p = Duration(d)
		}
	}
	if v, ok := env("ERRAND_QUEUES"); ok {
		q, err := parseQueues(v)
		if err != nil {
			return fmt.Errorf("errandconfig: ERRAND_QUEUES: %w", err)
		}
		s.Worker.Queues = q
	}
	return nil
}

// parseQueues reads "a:3,b:1" (a name alone weighs 1).
func parseQueues(v string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, w, found := strings.Cut(part, ":")
		weight := 1
		if found {
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%q: a weight is a whole number of at least 1", part)
			}
			weight = n
		}
		out[strings.TrimSpace(name)] = weight
	}
	return out, nil
}

// WorkerConfig returns the worker's settings as an errand.WorkerConfig.
// With no queues set, the worker consumes the default queue.
func (s *Settings) WorkerConfig() errand.WorkerConfig {
	w := errand.WorkerConfig{
		Concurrency:         s.Worker.Concurrency,
		Lease:               time.Duration(s.Worker.Lease),
		TaskTimeout:         time.Duration(s.Worker.TaskTimeout),
		ShutdownTimeout:     time.Duration(s.Worker.ShutdownTimeout),
		MaxRetries:          s.Worker.MaxRetries,
		UnknownTaskAttempts: s.Worker.UnknownTaskAttempts,
	}
	if len(s.Worker.Queues) > 0 {
		w.Queues = make(map[string]int, len(s.Worker.Queues))
		for q, n := range s.Worker.Queues {
			w.Queues[q] = n
		}
	}
	return w
}

// Open opens the broker and backend by their URLs (their driver packages
// must be imported, as for errand.OpenBroker) and returns an errand.Config
// with them and the default queue. On error nothing stays open.
func (s *Settings) Open(ctx context.Context) (errand.Config, error) {
	if s.Broker == "" || s.Backend == "" {
		return errand.Config{}, errors.New("errandconfig: a broker and a backend URL are required (broker/backend, ERRAND_BROKER/ERRAND_BACKEND)")
	}
	b, err := errand.OpenBroker(ctx, s.Broker)
	if err != nil {
		return errand.Config{}, err
	}
	be, err := errand.OpenBackend(ctx, s.Backend)
	if err != nil {
		b.Close()
		return errand.Config{}, err
	}
	return errand.Config{Broker: b, Backend: be, DefaultQueue: s.DefaultQueue}, nil
}

// EnvNames lists every environment variable Load reads, sorted.
func EnvNames() []string {
	n := []string{"ERRAND_BROKER", "ERRAND_BACKEND", "ERRAND_DEFAULT_QUEUE", "ERRAND_QUEUES", "ERRAND_CONCURRENCY",
		"ERRAND_LEASE", "ERRAND_TASK_TIMEOUT", "ERRAND_SHUTDOWN_TIMEOUT", "ERRAND_MAX_RETRIES", "ERRAND_UNKNOWN_TASK_ATTEMPTS"}
	sort.Strings(n)
	return n
}
