package errandconfig

import (
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func write(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFileThenEnv(t *testing.T) {
	p := write(t, `
broker: redis://127.0.0.1:6379/0
backend: redis://127.0.0.1:6379/1
default_queue: jobs
worker:
  queues: {critical: 3, jobs: 1}
  concurrency: 4
  lease: 45s
  task_timeout: 90
  shutdown_timeout: 1m
  max_retries: 7
  unknown_task_attempts: 2
`)
	s, err := Load(p, envOf(map[string]string{"ERRAND_CONCURRENCY": "16", "ERRAND_BACKEND": "mongodb://db/x"}))
	if err != nil {
		t.Fatal(err)
	}
	want := &Settings{Broker: "redis://127.0.0.1:6379/0", Backend: "mongodb://db/x", DefaultQueue: "jobs", Worker: Worker{
		Queues: map[string]int{"critical": 3, "jobs": 1}, Concurrency: 16, Lease: Duration(45 * time.Second),
		TaskTimeout: Duration(90 * time.Second), ShutdownTimeout: Duration(time.Minute), MaxRetries: 7, UnknownTaskAttempts: 2}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Load = %+v, want %+v (file, then the environment over it)", s, want)
	}
	w := s.WorkerConfig()
	if w.Concurrency != 16 || w.Lease != 45*time.Second || w.Queues["critical"] != 3 || w.MaxRetries != 7 {
		t.Errorf("WorkerConfig = %+v", w)
	}
}

func TestLoadEnvOnly(t *testing.T) {
	s, err := Load("", envOf(map[string]string{"ERRAND_BROKER": "memory://", "ERRAND_QUEUES": "a:2, b", "ERRAND_LEASE": "10s"}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Broker != "memory://" || !reflect.DeepEqual(s.Worker.Queues, map[string]int{"a": 2, "b": 1}) || s.Worker.Lease != Duration(10*time.Second) {
		t.Errorf("Load from the environment = %+v", s)
	}
}

func TestLoadRejectsBadInput(t *testing.T) {
	for name, c := range map[string]struct {
		file string
		env  map[string]string
		want string
	}{
		"unknown key":      {file: "brokr: x\n", want: "brokr"},
		"bad duration":     {file: "worker:\n  lease: soon\n", want: "not a duration"},
		"bad int env":      {env: map[string]string{"ERRAND_CONCURRENCY": "many"}, want: "ERRAND_CONCURRENCY"},
		"bad queue weight": {env: map[string]string{"ERRAND_QUEUES": "a:0"}, want: "ERRAND_QUEUES"},
	} {
		t.Run(name, func(t *testing.T) {
			p := ""
			if c.file != "" {
				p = write(t, c.file)
			}
			_, err := Load(p, envOf(c.env))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load error = %v, want one naming %q", err, c.want)
			}
		})
	}
}

func TestEmptyFile(t *testing.T) {
	if _, err := Load(write(t, ""), envOf(nil)); err != nil {
		t.Errorf("an empty file: %v", err)
	}
}

// machineryTestConfig is machinery v2.0.16's config/testconfig.yml, its
// one example YAML file (e2e/machinery reads the file itself from the
// module cache).
const machineryTestConfig = `---
broker: broker
default_queue: default_queue
result_backend: result_backend
results_expire_in: 123456
amqp:
  binding_key: binding_key
  exchange: exchange
  exchange_type: exchange_type
  prefetch_count: 123
  queue_declare_args:
    x-max-priority: 10
  queue_binding_args:
    image-type: png
    x-match: any
sqs:
  receive_wait_time_seconds: 123
  receive_visibility_timeout: 456
redis:
  max_idle: 12
  max_active: 123
  max_idle_timeout: 456
  wait: false
  read_timeout: 17
  write_timeout: 19
  connect_timeout: 21
  normal_tasks_poll_period: 1001
  delayed_tasks_poll_period: 23
  delayed_tasks_key: delayed_tasks_key
  master_name: master_name
no_unix_signals: true
dynamodb:
  task_states_table: task_states_table
  group_metas_table: group_metas_table
`

func TestMachineryFileAndEnv(t *testing.T) {
	m, err := LoadMachinery(write(t, machineryTestConfig), envOf(map[string]string{
		"BROKER": "redis://secret@10.0.0.1:6379/3", "RESULT_BACKEND": "redis://secret@10.0.0.1:6379/3",
		"REDIS_MASTER_NAME": "",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if m.DefaultQueue != "default_queue" || m.ResultsExpireIn != 123456 || m.Redis.DelayedTasksKey != "delayed_tasks_key" ||
		m.SQS.WaitTimeSeconds != 123 || *m.SQS.VisibilityTimeout != 456 || m.AMQP.PrefetchCount != 123 || m.DynamoDB.TaskStatesTable != "task_states_table" {
		t.Errorf("machinery's testconfig.yml read as %+v", m)
	}
	s, err := FromMachinery(m)
	if err != nil {
		t.Fatal(err)
	}
	// testconfig.yml's pool and timeout settings ride along as go-redis's
	// URL options; the smaller of its normal_tasks_poll_period (1001, the
	// BLPOP timeout) and delayed_tasks_poll_period (23) bounds one wait of
	// an idle fetch.
	pool := "dial_timeout=21s&"
	wantBroker := "redis://:secret@10.0.0.1:6379/3?default_queue=default_queue&delayed_tasks_key=delayed_tasks_key&" + pool +
		"format=machinery&max_active_conns=123&max_block=23ms&max_idle_conns=12&read_timeout=17s&write_timeout=19s"
	wantBackend := "redis://:secret@10.0.0.1:6379/3?" + pool + "format=machinery&max_active_conns=123&max_idle_conns=12&read_timeout=17s&result_expiry=123456s&write_timeout=19s"
	if s.Broker != wantBroker || s.Backend != wantBackend || s.DefaultQueue != "default_queue" || s.Worker.Queues["default_queue"] != 1 {
		t.Errorf("FromMachinery = %+v\nwant broker %s\nbackend %s", s, wantBroker, wantBackend)
	}
}

// TestMachineryPollPeriods: machinery's normal_tasks_poll_period is its
// BLPOP's timeout (a new task is taken at once), not a poll: it becomes
// the Redis broker's max_block, the longest one wait of an idle fetch
// lasts, capped by delayed_tasks_poll_period (a delayed task is moved when
// a wait ends), each at machinery's default when unset (1000 and 500 ms).
func TestMachineryPollPeriods(t *testing.T) {
	for _, c := range []struct {
		normal, delayed int
		want            string
	}{
		{0, 0, "500ms"},
		{1000, 0, "500ms"},
		{100, 0, "100ms"},
		{5000, 10000, "5000ms"},
		{0, 200, "200ms"},
		{1001, 23, "23ms"},
	} {
		s, err := FromMachinery(&Machinery{Broker: "redis://x:1", ResultBackend: "redis://x:1",
			Redis: &MachineryRedis{NormalTasksPollPeriod: c.normal, DelayedTasksPollPeriod: c.delayed}})
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(s.Broker)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if got := q.Get("max_block"); got != c.want || q.Has("poll_interval") {
			t.Errorf("normal_tasks_poll_period %d, delayed_tasks_poll_period %d -> %s; want max_block=%s and no poll_interval (an idle fetch waits on machinery's list, it does not poll)",
				c.normal, c.delayed, s.Broker, c.want)
		}
	}
}

func TestMachineryURLs(t *testing.T) {
	for _, c := range []struct {
		broker, master, want string
	}{
		{"redis://localhost:6379", "", "redis://localhost:6379?default_queue=machinery_tasks&format=machinery&max_block=500ms"},
		{"redis://localhost:26379/2", "mymaster", "redis-sentinel://localhost:26379/2?default_queue=machinery_tasks&format=machinery&master=mymaster&max_block=500ms"},
		{"https://sqs.eu-west-1.amazonaws.com/123456789012", "", "sqs:?format=machinery&region=eu-west-1"},
		{"redis://localhost:26379", "m", "redis-sentinel://localhost:26379?default_queue=machinery_tasks&format=machinery&master=m&max_block=500ms"},
		{"http://127.0.0.1:9324/000000000000", "", "sqs://127.0.0.1:9324?format=machinery&insecure=1"},
	} {
		s, err := FromMachinery(&Machinery{Broker: c.broker, ResultBackend: "redis://localhost:6379", Redis: &MachineryRedis{MasterName: c.master}})
		if err != nil {
			t.Errorf("%s: %v", c.broker, err)
			continue
		}
		if s.Broker != c.want {
			t.Errorf("broker %s -> %s, want %s", c.broker, s.Broker, c.want)
		}
	}
	for _, bad := range []string{"redis+socket://pw@/tmp/redis.sock", ""} {
		if _, err := FromMachinery(&Machinery{Broker: bad, ResultBackend: "redis://x:1"}); err == nil {
			t.Errorf("broker %q: no error, want one naming what is not supported", bad)
		}
	}
	s, err := FromMachinery(&Machinery{Broker: "redis://x:1", ResultBackend: "mongodb://u:p@db1:27017/admin?replicaSet=rs0", ResultsExpireIn: 60})
	if want := "mongodb://u:p@db1:27017/machinery?authSource=admin&format=machinery&replicaSet=rs0&result_expiry=60s"; err != nil || s.Backend != want {
		t.Errorf("mongodb:// result backend -> %q, %v; want %s", s.Backend, err, want)
	}
	if _, err := FromMachinery(&Machinery{Broker: "redis://x:1", ResultBackend: "memcache://x:11211"}); err == nil {
		t.Error("a memcache:// result backend: no error")
	}
	if _, err := FromMachinery(&Machinery{Broker: "redis://x:1", ResultBackend: "redis://x:1", Redis: &MachineryRedis{ClusterEnabled: true}}); err == nil {
		t.Error("Redis Cluster: no error")
	}
}

// Every variable MachineryEnvNames lists is read: setting it changes what
// LoadMachinery returns.
func TestMachineryEnvNamesAreRead(t *testing.T) {
	base, err := LoadMachinery("", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range MachineryEnvNames() {
		v := "7"
		if name == "REDIS_CLUSTER_ENABLED" || name == "AMQP_AUTO_DELETE" {
			v = "true"
		}
		m, err := LoadMachinery("", envOf(map[string]string{name: v}))
		if err != nil {
			t.Errorf("%s=%s: %v", name, v, err)
			continue
		}
		if reflect.DeepEqual(m, base) {
			t.Errorf("%s is listed by MachineryEnvNames but LoadMachinery ignores it", name)
		}
	}
	for _, name := range EnvNames() {
		v := "7"
		if name == "ERRAND_LEASE" || name == "ERRAND_TASK_TIMEOUT" || name == "ERRAND_SHUTDOWN_TIMEOUT" {
			v = "7s"
		}
		s, err := Load("", envOf(map[string]string{name: v}))
		if err != nil {
			t.Errorf("%s=%s: %v", name, v, err)
			continue
		}
		if reflect.DeepEqual(s, &Settings{}) {
			t.Errorf("%s is listed by EnvNames but Load ignores it", name)
		}
	}
}

// machinery's Redis backend keeps results for good when results_expire_in
// is negative and uses its default 3600 only for 0: the mapping keeps both.
func TestMachineryResultsExpireIn(t *testing.T) {
	for _, c := range []struct {
		in   int
		want string
	}{{0, "result_expiry=3600s"}, {-1, "result_expiry=never"}, {60, "result_expiry=60s"}} {
		s, err := FromMachinery(&Machinery{Broker: "redis://x:1", ResultBackend: "redis://x:1", ResultsExpireIn: c.in})
		if err != nil || !strings.Contains(s.Backend, c.want) {
			t.Errorf("results_expire_in %d -> backend %q, %v; want %s", c.in, s.Backend, err, c.want)
		}
	}
}

// machinery's AMQP broker URL and amqp: section map onto errand's amqp://
// URL in machinery's format (brokers/amqp's format=machinery parameters).
func TestMachineryAMQP(t *testing.T) {
	m := &Machinery{Broker: "amqp://guest:pw@rabbit:5672/vh", ResultBackend: "redis://x:1", DefaultQueue: "q",
		AMQP: &MachineryAMQP{Exchange: "ex", ExchangeType: "direct", BindingKey: "bk", PrefetchCount: 3,
			QueueDeclareArgs: map[string]any{"x-max-priority": 10}}}
	s, err := FromMachinery(m)
	want := "amqp://guest:pw@rabbit:5672/vh?binding_key=bk&default_queue=q&exchange=ex&exchange_type=direct&format=machinery&prefetch=3&queue_declare_args=%7B%22x-max-priority%22%3A10%7D"
	if err != nil || s.Broker != want {
		t.Errorf("FromMachinery broker = %q, %v\nwant %s", s.Broker, err, want)
	}
	env := envOf(map[string]string{"BROKER": "amqps://u:p@h:5671/", "RESULT_BACKEND": "redis://x:1", "AMQP_EXCHANGE": "e2", "AMQP_PREFETCH_COUNT": "7"})
	lm, err := LoadMachinery("", env)
	if err != nil {
		t.Fatal(err)
	}
	s, err = FromMachinery(lm)
	if want := "amqps://u:p@h:5671/?default_queue=machinery_tasks&exchange=e2&format=machinery&prefetch=7"; err != nil || s.Broker != want {
		t.Errorf("from machinery's env: broker %q, %v; want %s", s.Broker, err, want)
	}
}
