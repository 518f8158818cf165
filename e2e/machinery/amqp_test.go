package machinerye2e

import (
	"context"
	"strings"
	"testing"
	"time"

	machinery "github.com/RichardKnop/machinery/v2"
	mbackend "github.com/RichardKnop/machinery/v2/backends/redis"
	mamqp "github.com/RichardKnop/machinery/v2/brokers/amqp"
	"github.com/RichardKnop/machinery/v2/config"
	"github.com/RichardKnop/machinery/v2/locks/eager"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
	errandconfig "github.com/errand-go/errand/config"
)

// rabbit returns ERRAND_AMQP_URL once RabbitMQ accepts a connection, and
// deletes the test's queue (with errand's NAME.dead) and exchange when the
// test ends.
func rabbit(t *testing.T, exchange, queue string) string {
	t.Helper()
	u := need(t, "ERRAND_AMQP_URL")
	c, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		unreachable(t, "RabbitMQ at ERRAND_AMQP_URL", err)
	}
	c.Close()
	t.Cleanup(func() {
		c, err := amqp.Dial(u)
		if err != nil {
			return
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return
		}
		ch.QueueDelete(queue, false, false, false)
		ch.QueueDelete(queue+".dead", false, false, false)
		ch.ExchangeDelete(exchange, false, false)
	})
	return u
}

// machineryAMQPConfig is machinery's AMQP config on the test's own
// exchange and queue. Its binding key is the queue's name: with machinery's
// example settings (binding key machinery_task, default queue
// machinery_tasks) its producer also declares a queue named after the
// binding key, bound with it, which no worker consumes and which receives
// a copy of every task sent without a RoutingKey.
func machineryAMQPConfig(u, exchange, queue string) *config.Config {
	return &config.Config{
		Broker:          u,
		DefaultQueue:    queue,
		ResultsExpireIn: 3600,
		NoUnixSignals:   true,
		AMQP:            &config.AMQPConfig{Exchange: exchange, ExchangeType: "direct", BindingKey: queue, PrefetchCount: 4},
		Redis:           &config.RedisConfig{},
	}
}

// machineryAMQP returns a machinery server on RabbitMQ with its Redis
// result backend, as a machinery application on AMQP makes one.
func machineryAMQP(rs *redisServer, cnf *config.Config) *machinery.Server {
	return machinery.NewServer(cnf, mamqp.New(cnf), mbackend.NewGR(cnf, []string{rs.addr}, testDB), eager.New())
}

func errandAMQPBroker(u, exchange, queue string) *amqpbroker.Broker {
	return amqpbroker.New(u, &amqpbroker.Options{Machinery: &amqpbroker.MachineryOptions{
		Exchange: exchange, ExchangeType: "direct", BindingKey: queue, DefaultQueue: queue}, Prefetch: 4})
}

func errandOnMachineryAMQP(t *testing.T, rs *redisServer, u, exchange, queue string, r *runs) {
	errandWorker(t, errandAMQPBroker(u, exchange, queue), redisbackend.NewMachinery(rs.client, nil), queue, r)
}

func amqpNames(prefix string) (exchange, queue string) {
	q := strings.ToLower(unique(prefix))
	return q + "-exchange", q
}

// TestAMQPMachineryProducerErrandWorkers: an unchanged machinery producer
// on RabbitMQ (results in Redis) sends plain tasks, an ETA task (in
// machinery's delay queue until due), a chain, a group, a chord of 100 and
// a retried task; errand workers alone run them; machinery's AsyncResult
// reads every result; each runs once.
func TestAMQPMachineryProducerErrandWorkers(t *testing.T) {
	rs := newRedis(t)
	exchange, queue := amqpNames("machinery-amqp")
	u := rabbit(t, exchange, queue)
	r := newRuns()
	errandOnMachineryAMQP(t, rs, u, exchange, queue, r)
	want := scenario(t, machineryAMQP(rs, machineryAMQPConfig(u, exchange, queue)), r, 100)
	r.exactlyOnce(t, want)
	if k := r.kinds(); k["machinery"] != 0 {
		t.Errorf("machinery workers ran %d tasks in a test without any", k["machinery"])
	}
}

// TestAMQPMixedFleet: machinery and errand workers on one machinery queue
// on RabbitMQ; the same workflows complete, machinery's AsyncResult reads
// every result, and each task runs exactly once (RabbitMQ gives an unacked
// delivery back when its consumer's channel closes, for either kind of
// worker; machinery acks after the task ran, so a machinery worker that
// dies mid-task runs it again elsewhere, which this test does not do).
func TestAMQPMixedFleet(t *testing.T) {
	rs := newRedis(t)
	exchange, queue := amqpNames("machinery-amqp-mixed")
	u := rabbit(t, exchange, queue)
	r := newRuns()
	errandOnMachineryAMQP(t, rs, u, exchange, queue, r)
	machineryWorker(t, machineryAMQP(rs, machineryAMQPConfig(u, exchange, queue)), r)
	want := scenario(t, machineryAMQP(rs, machineryAMQPConfig(u, exchange, queue)), r, 100)
	r.exactlyOnce(t, want)
	k := r.kinds()
	if k["errand"] == 0 || k["machinery"] == 0 {
		t.Errorf("runs by worker kind %v: a mixed fleet test needs both kinds to have run tasks", k)
	}
	t.Logf("runs by worker kind: %v", k)
}

// TestAMQPErrandProducerMachineryWorkers: an errand producer on
// machinery's AMQP format (results in machinery's Redis keys) sends a
// task, an ETA task, a chain and a chord of 100; machinery workers alone
// run them (what errand publishes is machinery's JSON on machinery's
// exchange, its delays dead-lettered there), and errand's results read
// what machinery recorded.
func TestAMQPErrandProducerMachineryWorkers(t *testing.T) {
	rs := newRedis(t)
	exchange, queue := amqpNames("machinery-amqp-prod")
	u := rabbit(t, exchange, queue)
	r := newRuns()
	machineryWorker(t, machineryAMQP(rs, machineryAMQPConfig(u, exchange, queue)), r)
	srv, err := errand.NewServer(errand.Config{
		Broker:       errandAMQPBroker(u, exchange, queue),
		Backend:      redisbackend.NewMachinery(rs.client, nil),
		DefaultQueue: queue,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	want := errandProducer(t, srv, r)
	r.exactlyOnce(t, want)
	if k := r.kinds(); k["errand"] != 0 {
		t.Errorf("errand workers ran %d tasks in a test without any", k["errand"])
	}
}

// TestAMQPMachineryYAMLConfiguresErrandWorker: machinery's own example
// config file, unchanged, with a deployment's environment variables
// (BROKER naming RabbitMQ, RESULT_BACKEND Redis; its exchange, binding key
// and default queue made the test's own, and its exchange_type, which the
// file sets to the placeholder "exchange_type", set to direct), configures
// an errand worker; a machinery AMQP producer configured from the same
// file by machinery's loader sends a task and an ETA task and reads their
// results. Its queue_declare_args (x-max-priority 10) and
// queue_binding_args are declared by both as the same, or RabbitMQ would
// refuse the second declaration.
func TestAMQPMachineryYAMLConfiguresErrandWorker(t *testing.T) {
	rs := newRedis(t)
	exchange, queue := amqpNames("machinery-amqp-yaml")
	bindingKey := queue + "-bk"
	u := rabbit(t, exchange, queue)
	t.Cleanup(func() {
		// machinery's producer declares a queue named after the binding key
		// (the routing key of a task that names none), bound with it.
		if c, err := amqp.Dial(u); err == nil {
			if ch, err := c.Channel(); err == nil {
				ch.QueueDelete(bindingKey, false, false, false)
			}
			c.Close()
		}
	})
	path := machineryTestConfig(t)
	redisURL := "redis://" + rs.addr + "/12"
	env := map[string]string{"BROKER": u, "RESULT_BACKEND": redisURL, "REDIS_MASTER_NAME": "", "DEFAULT_QUEUE": queue,
		"AMQP_EXCHANGE": exchange, "AMQP_EXCHANGE_TYPE": "direct", "AMQP_BINDING_KEY": bindingKey}
	mc, err := errandconfig.LoadMachinery(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	settings, err := errandconfig.FromMachinery(mc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := settings.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := errand.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newRuns()
	if err := srv.RegisterTasks(taskFuncs(r, "errand")); err != nil {
		t.Fatal(err)
	}
	w := srv.NewWorker(settings.WorkerConfig())
	w.Start()
	defer func() {
		w.Shutdown(context.Background())
		srv.Close()
	}()
	// The worker's queue must be bound before machinery's producer sends
	// (w.Start binds it on its first fetch, in the background): a task
	// sent without a RoutingKey goes to the binding key's queues, and a
	// queue bound later does not receive it. Queue declares and binds at
	// once.
	if _, err := srv.Queue(ctx, queue); err != nil {
		t.Fatal(err)
	}

	mcnf, err := config.NewFromYaml(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if mcnf.AMQP.QueueDeclareArgs["x-max-priority"] == nil {
		t.Fatalf("machinery read %s without its queue_declare_args: %+v", path, mcnf.AMQP)
	}
	mcnf.Broker, mcnf.DefaultQueue, mcnf.Redis.MasterName = u, queue, ""
	mcnf.AMQP.Exchange, mcnf.AMQP.ExchangeType, mcnf.AMQP.BindingKey = exchange, "direct", bindingKey
	prod := machineryAMQP(rs, mcnf)
	tag := unique("amqp-yaml")
	ar, err := prod.SendTask(sig("add", tag, 20, 22))
	if err != nil {
		t.Fatal(err)
	}
	eta := time.Now().Add(time.Second)
	later := sig("add", tag+"-eta", 1, 1)
	later.ETA = &eta
	ar2, err := prod.SendTask(later)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ar.GetWithTimeout(getTimeout, getSleep)
	if err != nil || len(got) != 1 || got[0].Interface() != int64(42) {
		t.Errorf("task sent by machinery with testconfig.yml's amqp section: result %v, %v; want 42", values(got), err)
	}
	got, err = ar2.GetWithTimeout(getTimeout, getSleep)
	if err != nil || len(got) != 1 || got[0].Interface() != int64(2) {
		t.Errorf("ETA task through machinery's delay queue: result %v, %v; want 2", values(got), err)
	}
	r.exactlyOnce(t, map[string]int{tag: 1, tag + "-eta": 1})
}
