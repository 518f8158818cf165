package machinerye2e

import (
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
