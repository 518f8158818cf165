package errandconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Machinery is machinery v2's config.Config as its YAML file and
// environment variables give it: every key machinery reads is accepted
// (so machinery's own files load unchanged), and FromMachinery maps those
// errand needs. The YAML keys and variable names are machinery's
// (config/config.go, its yaml and envconfig tags).
type Machinery struct {
	Broker                  string `yaml:"broker"`                    // BROKER
	Lock                    string `yaml:"lock"`                      // LOCK (not needed by errand)
	MultipleBrokerSeparator string `yaml:"multiple_broker_separator"` // MULTIPLE_BROKEN_SEPARATOR (sic; not used)
	DefaultQueue            string `yaml:"default_queue"`             // DEFAULT_QUEUE
	ResultBackend           string `yaml:"result_backend"`            // RESULT_BACKEND
	ResultsExpireIn         int    `yaml:"results_expire_in"`         // RESULTS_EXPIRE_IN, seconds
	NoUnixSignals           bool   `yaml:"no_unix_signals"`           // NO_UNIX_SIGNALS (not used)

	AMQP     *MachineryAMQP     `yaml:"amqp"`
	SQS      *MachinerySQS      `yaml:"sqs"`
	Redis    *MachineryRedis    `yaml:"redis"`
	DynamoDB *MachineryDynamoDB `yaml:"dynamodb"`
}

// MachineryRedis is machinery's redis: section.
type MachineryRedis struct {
	MaxIdle                int    `yaml:"max_idle"`                  // REDIS_MAX_IDLE
	MaxActive              int    `yaml:"max_active"`                // REDIS_MAX_ACTIVE
	IdleTimeout            int    `yaml:"max_idle_timeout"`          // REDIS_IDLE_TIMEOUT
	Wait                   bool   `yaml:"wait"`                      // REDIS_WAIT
	ReadTimeout            int    `yaml:"read_timeout"`              // REDIS_READ_TIMEOUT, seconds
	WriteTimeout           int    `yaml:"write_timeout"`             // REDIS_WRITE_TIMEOUT, seconds
	ConnectTimeout         int    `yaml:"connect_timeout"`           // REDIS_CONNECT_TIMEOUT, seconds
	NormalTasksPollPeriod  int    `yaml:"normal_tasks_poll_period"`  // REDIS_NORMAL_TASKS_POLL_PERIOD, ms
	DelayedTasksPollPeriod int    `yaml:"delayed_tasks_poll_period"` // REDIS_DELAYED_TASKS_POLL_PERIOD, ms
	DelayedTasksKey        string `yaml:"delayed_tasks_key"`         // REDIS_DELAYED_TASKS_KEY
	ClientName             string `yaml:"client_name"`               // REDIS_CLIENT_NAME
	MasterName             string `yaml:"master_name"`               // REDIS_MASTER_NAME
	ClusterEnabled         bool   `yaml:"cluster_enabled"`           // REDIS_CLUSTER_ENABLED
	SentinelPassword       string `yaml:"sentinel_password"`         // REDIS_SENTINEL_PASSWORD
}

// MachinerySQS is machinery's sqs: section.
type MachinerySQS struct {
	WaitTimeSeconds     int  `yaml:"receive_wait_time_seconds"`  // SQS_WAIT_TIME_SECONDS
	VisibilityTimeout   *int `yaml:"receive_visibility_timeout"` // SQS_VISIBILITY_TIMEOUT, seconds
	VisibilityHeartBeat bool `yaml:"visibility_hearth_beat"`     // SQS_VISIBILITY_HEARTBEAT (sic)
}

// MachineryAMQP is machinery's amqp: section (FromMachinery maps it onto
// the amqp:// URL's format=machinery parameters).
type MachineryAMQP struct {
	Exchange         string         `yaml:"exchange"`           // AMQP_EXCHANGE
	ExchangeType     string         `yaml:"exchange_type"`      // AMQP_EXCHANGE_TYPE
	QueueDeclareArgs map[string]any `yaml:"queue_declare_args"` // (file only)
	QueueBindingArgs map[string]any `yaml:"queue_binding_args"` // (file only)
	BindingKey       string         `yaml:"binding_key"`        // AMQP_BINDING_KEY
	PrefetchCount    int            `yaml:"prefetch_count"`     // AMQP_PREFETCH_COUNT
	AutoDelete       bool           `yaml:"auto_delete"`        // AMQP_AUTO_DELETE (not used)
	DelayedQueue     string         `yaml:"delayed_queue"`      // AMQP_DELAYED_QUEUE (not used)
}

// MachineryDynamoDB is machinery's dynamodb: section, read and not used
// (errand has no DynamoDB backend).
type MachineryDynamoDB struct {
	TaskStatesTable string `yaml:"task_states_table"`
	GroupMetasTable string `yaml:"group_metas_table"`
}

// machinery's defaults (config.defaultCnf, and its Redis broker's own)
// for what errand uses.
const (
	machineryDefaultQueue  = "machinery_tasks"
	machineryResultsExpire = 3600
	machineryNormalPoll    = 1000 // ms: redis.normal_tasks_poll_period, BLPOP's timeout
	machineryDelayedPoll   = 500  // ms: redis.delayed_tasks_poll_period
)

// machineryMaxBlock is the Redis broker's max_block in ms: the longer a
// machinery worker waits for anything, the smaller of its BLPOP's timeout
// (normal_tasks_poll_period) and its delayed-set poll
// (delayed_tasks_poll_period), each at machinery's default when unset. An
// idle errand worker takes a new task the moment it is pushed whatever
// this is (it waits on machinery's list, as BLPOP does); between two
// waits it moves due delayed tasks, so a delayed task is not later than
// machinery's poll would have it.
func machineryMaxBlock(r MachineryRedis) int {
	normal, delayed := r.NormalTasksPollPeriod, r.DelayedTasksPollPeriod
	if normal <= 0 {
		normal = machineryNormalPoll
	}
	if delayed <= 0 {
		delayed = machineryDelayedPoll
	}
	return min(normal, delayed)
}

// LoadMachinery reads a machinery config: the YAML file at path (none if
// empty), then machinery's environment variables over it (os.LookupEnv
// when env is nil). machinery reads a file or the environment; errand
// reads both, the environment winning, so a deployment's BROKER and
// RESULT_BACKEND can point a checked-in file at its servers. Unknown keys
// are an error, as in machinery (which uses yaml.v2's UnmarshalStrict).
func LoadMachinery(path string, env Env) (*Machinery, error) {
	if env == nil {
		env = os.LookupEnv
	}
	m := &Machinery{}
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("errandconfig: %w", err)
		}
		if err := decodeStrict(raw, m); err != nil {
			return nil, fmt.Errorf("errandconfig: machinery config %s: %w", path, err)
		}
	}
	if err := m.applyEnv(env); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Machinery) applyEnv(env Env) error {
	if m.Redis == nil {
		m.Redis = &MachineryRedis{}
	}
	if m.SQS == nil {
		m.SQS = &MachinerySQS{}
	}
	if m.AMQP == nil {
		m.AMQP = &MachineryAMQP{}
	}
	strs := map[string]*string{
		"BROKER": &m.Broker, "LOCK": &m.Lock, "DEFAULT_QUEUE": &m.DefaultQueue, "RESULT_BACKEND": &m.ResultBackend,
		"REDIS_DELAYED_TASKS_KEY": &m.Redis.DelayedTasksKey, "REDIS_MASTER_NAME": &m.Redis.MasterName,
		"REDIS_CLIENT_NAME": &m.Redis.ClientName, "REDIS_SENTINEL_PASSWORD": &m.Redis.SentinelPassword,
		"AMQP_EXCHANGE": &m.AMQP.Exchange, "AMQP_EXCHANGE_TYPE": &m.AMQP.ExchangeType, "AMQP_BINDING_KEY": &m.AMQP.BindingKey,
		"AMQP_DELAYED_QUEUE": &m.AMQP.DelayedQueue,
	}
	for name, p := range strs {
		if v, ok := env(name); ok {
			*p = v
		}
	}
	ints := map[string]*int{
		"RESULTS_EXPIRE_IN": &m.ResultsExpireIn, "REDIS_NORMAL_TASKS_POLL_PERIOD": &m.Redis.NormalTasksPollPeriod,
		"REDIS_DELAYED_TASKS_POLL_PERIOD": &m.Redis.DelayedTasksPollPeriod, "REDIS_READ_TIMEOUT": &m.Redis.ReadTimeout,
		"REDIS_WRITE_TIMEOUT": &m.Redis.WriteTimeout, "REDIS_CONNECT_TIMEOUT": &m.Redis.ConnectTimeout,
		"SQS_WAIT_TIME_SECONDS": &m.SQS.WaitTimeSeconds, "REDIS_MAX_IDLE": &m.Redis.MaxIdle, "REDIS_MAX_ACTIVE": &m.Redis.MaxActive,
		"REDIS_IDLE_TIMEOUT": &m.Redis.IdleTimeout, "AMQP_PREFETCH_COUNT": &m.AMQP.PrefetchCount,
	}
	for name, p := range ints {
		if v, ok := env(name); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("errandconfig: %s=%q is not a whole number", name, v)
			}
			*p = n
		}
	}
	if v, ok := env("SQS_VISIBILITY_TIMEOUT"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("errandconfig: SQS_VISIBILITY_TIMEOUT=%q is not a whole number", v)
		}
		m.SQS.VisibilityTimeout = &n
	}
	if v, ok := env("AMQP_AUTO_DELETE"); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("errandconfig: AMQP_AUTO_DELETE=%q is not a boolean", v)
		}
		m.AMQP.AutoDelete = b
	}
	if v, ok := env("REDIS_CLUSTER_ENABLED"); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("errandconfig: REDIS_CLUSTER_ENABLED=%q is not a boolean", v)
		}
		m.Redis.ClusterEnabled = b
	}
	return nil
}

// MachineryEnvNames lists the machinery environment variables
// LoadMachinery reads.
func MachineryEnvNames() []string {
	return []string{"AMQP_AUTO_DELETE", "AMQP_BINDING_KEY", "AMQP_DELAYED_QUEUE", "AMQP_EXCHANGE", "AMQP_EXCHANGE_TYPE", "AMQP_PREFETCH_COUNT",
		"BROKER", "DEFAULT_QUEUE", "LOCK", "REDIS_CLIENT_NAME", "REDIS_CLUSTER_ENABLED", "REDIS_CONNECT_TIMEOUT",
		"REDIS_DELAYED_TASKS_KEY", "REDIS_DELAYED_TASKS_POLL_PERIOD", "REDIS_IDLE_TIMEOUT", "REDIS_MASTER_NAME", "REDIS_MAX_ACTIVE",
		"REDIS_MAX_IDLE", "REDIS_NORMAL_TASKS_POLL_PERIOD", "REDIS_READ_TIMEOUT", "REDIS_SENTINEL_PASSWORD", "REDIS_WRITE_TIMEOUT",
		"RESULTS_EXPIRE_IN", "RESULT_BACKEND", "SQS_VISIBILITY_TIMEOUT", "SQS_WAIT_TIME_SECONDS"}
}

// FromMachinery maps a machinery config onto errand's Settings: drivers
// in their machinery formats (on machinery's queues, delayed set and
// result keys), the default queue (machinery's "machinery_tasks" when
// unset), which is also the worker's queue, result expiry, and the SQS
// visibility timeout as the worker's lease. Broker URLs, machinery's
// forms:
//
//	redis://[password@]host:port[/db]  -> redis://:password@host:port/db?format=machinery
//	                                      (with redis.master_name: redis-sentinel://...?master=NAME)
//	rediss://...                       -> the same over TLS
//	https://sqs.REGION.amazonaws.com/ACCOUNT, or any http(s) URL the
//	  queue URLs start with (machinery sends to BROKER+"/"+queue)
//	                                   -> sqs://?region=REGION&format=machinery, or
//	                                      sqs://HOST:PORT?format=machinery[&insecure=1]
//	amqp://user:pass@host:port/vhost   -> the same URL with format=machinery,
//	                                      default_queue and machinery's amqp:
//	                                      section (below); amqps:// over TLS
//
// On Redis, machinery's read_timeout, write_timeout and connect_timeout
// (seconds), max_idle, max_active and client_name become go-redis's URL
// options (read_timeout, write_timeout, dial_timeout, max_idle_conns,
// max_active_conns, client_name), sentinel_password goes with a
// master_name, and the smaller of normal_tasks_poll_period and
// delayed_tasks_poll_period (ms; machinery's defaults 1000 and 500 when
// unset) is the broker's max_block, the longest one wait of an idle fetch
// lasts (it takes a new task at once, as machinery's BLPOP does); on SQS, receive_wait_time_seconds is the broker's wait
// (at most SQS's 20); on AMQP, exchange, exchange_type and binding_key
// become the URL's parameters of the same names, prefetch_count its
// prefetch, queue_declare_args and queue_binding_args JSON objects (a
// queue must be declared with the arguments machinery gave it), and
// auto_delete and delayed_queue are read and not used (errand delays
// through queues of its own that dead-letter to machinery's exchange).
//
// Result backends: redis:// and rediss:// as above; mongodb:// and
// mongodb+srv:// -> the same URI on the database "machinery" (machinery's;
// a database in the URI becomes its authSource) with format=machinery.
// AMQP result backends, redis+socket://, Redis Cluster (machinery's
// keys have no hash tags), and the Memcache and DynamoDB backends are
// errors naming what is not supported.
func FromMachinery(m *Machinery) (*Settings, error) {
	var r MachineryRedis
	if m.Redis != nil {
		r = *m.Redis
	}
	var sq MachinerySQS
	if m.SQS != nil {
		sq = *m.SQS
	}
	queue := m.DefaultQueue
	if queue == "" {
		queue = machineryDefaultQueue
	}
	// machinery's Redis backend keeps results for good when
	// results_expire_in < 0 and uses its default 3600 only for 0.
	expire := m.ResultsExpireIn
	if expire == 0 {
		expire = machineryResultsExpire
	}
	s := &Settings{DefaultQueue: queue, Worker: Worker{Queues: map[string]int{queue: 1}}}
	var err error
	var a MachineryAMQP
	if m.AMQP != nil {
		a = *m.AMQP
	}
	if s.Broker, err = machineryBroker(m.Broker, queue, r, sq, a); err != nil {
		return nil, err
	}
	if s.Backend, err = machineryBackend(m.ResultBackend, expire, r); err != nil {
		return nil, err
	}
	if m.SQS != nil && m.SQS.VisibilityTimeout != nil && *m.SQS.VisibilityTimeout > 0 && strings.HasPrefix(s.Broker, "sqs:") {
		s.Worker.Lease = Duration(time.Duration(*m.SQS.VisibilityTimeout) * time.Second)
	}
	return s, nil
}

func machineryBroker(raw, queue string, r MachineryRedis, sq MachinerySQS, a MachineryAMQP) (string, error) {
	if raw == "" {
		return "", errors.New("errandconfig: machinery config has no broker (broker, BROKER)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("errandconfig: machinery broker is not a URL: %v", redactErr(err))
	}
	switch u.Scheme {
	case "redis", "rediss":
		q := url.Values{"format": {"machinery"}, "default_queue": {queue}}
		if r.DelayedTasksKey != "" {
			q.Set("delayed_tasks_key", r.DelayedTasksKey)
		}
		q.Set("max_block", strconv.Itoa(machineryMaxBlock(r))+"ms")
		return machineryRedisURL(u, q, r)
	case "https", "http":
		q := url.Values{"format": {"machinery"}}
		host := u.Host
		if region, ok := awsRegion(u.Hostname()); ok {
			q.Set("region", region)
			host = ""
		}
		if u.Scheme == "http" {
			q.Set("insecure", "1")
		}
		if sq.WaitTimeSeconds > 0 {
			q.Set("wait", strconv.Itoa(min(sq.WaitTimeSeconds, 20))+"s") // SQS's longest poll is 20s
		}
		if r := u.Query().Get("region"); r != "" {
			q.Set("region", r)
		}
		return (&url.URL{Scheme: "sqs", Host: host, RawQuery: q.Encode()}).String(), nil
	case "amqp", "amqps":
		return machineryAMQPURL(u, queue, a)
	}
	return "", fmt.Errorf("errandconfig: machinery broker scheme %q is not supported (redis, rediss, amqp, amqps, or SQS's https queue URL prefix)", u.Scheme)
}

func machineryBackend(raw string, expire int, r MachineryRedis) (string, error) {
	if raw == "" {
		return "", errors.New("errandconfig: machinery config has no result backend (result_backend, RESULT_BACKEND)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("errandconfig: machinery result backend is not a URL: %v", redactErr(err))
	}
	switch u.Scheme {
	case "redis", "rediss":
		q := url.Values{"format": {"machinery"}, "result_expiry": {strconv.Itoa(expire) + "s"}}
		if expire < 0 {
			q.Set("result_expiry", "never")
		}
		return machineryRedisURL(u, q, r)
	case "mongodb", "mongodb+srv":
		// machinery keeps its collections in the database "machinery"
		// (config.MongoDB.Database, which only code can set); a database
		// in its URI is the one to authenticate against.
		q := u.Query()
		if db := strings.Trim(u.Path, "/"); db != "" && q.Get("authSource") == "" {
			q.Set("authSource", db)
		}
		q.Set("format", "machinery")
		if expire < 0 {
			// machinery's Mongo backend would write a delete_at in the
			// past (gone at the next TTL pass); errand keeps its default.
			expire = machineryResultsExpire
		}
		q.Set("result_expiry", strconv.Itoa(expire)+"s")
		out := *u
		out.Path, out.RawQuery = "/machinery", q.Encode()
		return out.String(), nil
	}
	return "", fmt.Errorf("errandconfig: machinery result backend scheme %q is not supported in machinery's format (redis, rediss, mongodb, mongodb+srv)", u.Scheme)
}

// machineryRedisURL turns machinery's redis://[password@]host:port[/db]
// (a lone user-info part is the password) into errand's form.
func machineryRedisURL(u *url.URL, q url.Values, r MachineryRedis) (string, error) {
	if r.ClusterEnabled {
		return "", errors.New("errandconfig: machinery's Redis Cluster mode is not supported: machinery's keys carry no hash tags")
	}
	out := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			out.User = url.UserPassword(u.User.Username(), pw)
		} else if name := u.User.Username(); name != "" {
			out.User = url.UserPassword("", name)
		}
	}
	if r.MasterName != "" {
		out.Scheme += "-sentinel"
		q.Set("master", r.MasterName)
		if r.SentinelPassword != "" {
			q.Set("sentinel_password", r.SentinelPassword)
		}
	}
	// machinery's pool and timeout settings, as go-redis's URL options.
	secs := map[string]int{"read_timeout": r.ReadTimeout, "write_timeout": r.WriteTimeout, "dial_timeout": r.ConnectTimeout}
	for k, v := range secs {
		if v > 0 {
			q.Set(k, strconv.Itoa(v)+"s")
		}
	}
	if r.MaxIdle > 0 {
		q.Set("max_idle_conns", strconv.Itoa(r.MaxIdle))
	}
	if r.MaxActive > 0 {
		q.Set("max_active_conns", strconv.Itoa(r.MaxActive))
	}
	if r.ClientName != "" {
		q.Set("client_name", r.ClientName)
	}
	out.RawQuery = q.Encode()
	return out.String(), nil
}

// awsRegion returns REGION from sqs.REGION.amazonaws.com.
func awsRegion(host string) (string, bool) {
	rest, ok := strings.CutPrefix(host, "sqs.")
	if !ok {
		return "", false
	}
	region, ok := strings.CutSuffix(rest, ".amazonaws.com")
	return region, ok && region != "" && !strings.Contains(region, ".")
}

// redactErr drops the URL (and its secrets) from a url.Parse error.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// machineryAMQPURL adds format=machinery and machinery's amqp: section to
// machinery's amqp:// broker URL (its user, password, host and vhost are
// amqp091's, as errand's).
func machineryAMQPURL(u *url.URL, queue string, a MachineryAMQP) (string, error) {
	q := u.Query()
	q.Set("format", "machinery")
	q.Set("default_queue", queue)
	for k, v := range map[string]string{"exchange": a.Exchange, "exchange_type": a.ExchangeType, "binding_key": a.BindingKey} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if a.PrefetchCount > 0 {
		q.Set("prefetch", strconv.Itoa(a.PrefetchCount))
	}
	for k, v := range map[string]map[string]any{"queue_declare_args": a.QueueDeclareArgs, "queue_binding_args": a.QueueBindingArgs} {
		if len(v) == 0 {
			continue
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("errandconfig: machinery amqp.%s: %w", k, err)
		}
		q.Set(k, string(raw))
	}
	out := *u
	out.RawQuery = q.Encode()
	return out.String(), nil
}
