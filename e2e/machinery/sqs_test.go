package machinerye2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	machinery "github.com/RichardKnop/machinery/v2"
	mbackend "github.com/RichardKnop/machinery/v2/backends/redis"
	msqs "github.com/RichardKnop/machinery/v2/brokers/sqs"
	"github.com/RichardKnop/machinery/v2/config"
	"github.com/RichardKnop/machinery/v2/locks/eager"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	sqsbroker "github.com/errand-go/errand/brokers/sqs"
)

// sqsQueue returns an SQS client on ERRAND_SQS_ENDPOINT and the URL prefix
// machinery's config.Broker needs (machinery sends to Broker+"/"+queue),
// creating queue.
func sqsQueue(t *testing.T, queue string) (*awssqs.Client, string) {
	t.Helper()
	ep := need(t, "ERRAND_SQS_ENDPOINT")
	if _, err := http.Get(ep); err != nil {
		unreachable(t, "SQS endpoint at ERRAND_SQS_ENDPOINT", err)
	}
	c := awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(ep),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, sqsbroker.RequestBodyWorkaround)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(queue)})
	if err != nil {
		t.Fatalf("create SQS queue %s: %v", queue, err)
	}
	u := aws.ToString(out.QueueUrl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
	})
	prefix, ok := strings.CutSuffix(u, "/"+queue)
	if !ok {
		t.Fatalf("queue URL %s does not end in /%s", u, queue)
	}
	return c, prefix
}

// machinerySQS returns a machinery server on SQS with its Redis result
// backend, as a machinery application on SQS makes one.
func machinerySQS(t *testing.T, rs *redisServer, c *awssqs.Client, brokerURL, queue string) *machinery.Server {
	t.Helper()
	visibility := 30
	cnf := &config.Config{
		Broker:          brokerURL,
		DefaultQueue:    queue,
		ResultsExpireIn: 3600,
		NoUnixSignals:   true,
		SQS:             &config.SQSConfig{Client: c, WaitTimeSeconds: 1, VisibilityTimeout: &visibility},
		Redis:           &config.RedisConfig{},
	}
	b, err := msqs.New(cnf)
	if err != nil {
		t.Fatal(err)
	}
	return machinery.NewServer(cnf, b, mbackend.NewGR(cnf, []string{rs.addr}, testDB), eager.New())
}

func errandOnMachinerySQS(t *testing.T, rs *redisServer, c *awssqs.Client, queue string, r *runs) {
	broker := sqsbroker.New(c, &sqsbroker.Options{Machinery: true, NoCreate: true, WaitTime: time.Second})
	errandWorker(t, broker, redisbackend.NewMachinery(rs.client, nil), queue, r)
}

// TestSQSMachineryProducerErrandWorkers: an unchanged machinery producer
// on SQS (results in Redis) sends plain tasks, an ETA task, a chain, a
// group, a chord of 100 and a retried task; errand workers alone run
// them; machinery's AsyncResult reads every result; each runs once.
func TestSQSMachineryProducerErrandWorkers(t *testing.T) {
	rs := newRedis(t)
	queue := unique("machinery-sqs")
	c, brokerURL := sqsQueue(t, queue)
	r := newRuns()
	errandOnMachinerySQS(t, rs, c, queue, r)
	want := scenario(t, machinerySQS(t, rs, c, brokerURL, queue), r, 100)
	r.exactlyOnce(t, want)
	if k := r.kinds(); k["machinery"] != 0 {
		t.Errorf("machinery workers ran %d tasks in a test without any", k["machinery"])
	}
}

// TestSQSMixedFleet: machinery and errand workers on one SQS queue; the
// same workflows complete and each task runs exactly once (SQS is
// at-least-once for both: a worker that dies leaves its message to come
// back after its visibility timeout).
func TestSQSMixedFleet(t *testing.T) {
	rs := newRedis(t)
	queue := unique("machinery-sqs-mixed")
	c, brokerURL := sqsQueue(t, queue)
	r := newRuns()
	errandOnMachinerySQS(t, rs, c, queue, r)
	machineryWorker(t, machinerySQS(t, rs, c, brokerURL, queue), r)
	want := scenario(t, machinerySQS(t, rs, c, brokerURL, queue), r, 100)
	r.exactlyOnce(t, want)
	k := r.kinds()
	if k["errand"] == 0 || k["machinery"] == 0 {
		t.Errorf("runs by worker kind %v: a mixed fleet test needs both kinds to have run tasks", k)
	}
	t.Logf("runs by worker kind: %v", k)
}

// TestSQSErrandProducerMachineryWorkers: an errand producer on machinery's
// SQS format (results in machinery's Redis keys) sends a task, an ETA
// task, a chain and a chord of 100; machinery workers alone run them, and
// errand's results read what machinery recorded.
func TestSQSErrandProducerMachineryWorkers(t *testing.T) {
	rs := newRedis(t)
	queue := unique("machinery-sqs-prod")
	c, brokerURL := sqsQueue(t, queue)
	r := newRuns()
	machineryWorker(t, machinerySQS(t, rs, c, brokerURL, queue), r)
	srv, err := errand.NewServer(errand.Config{
		Broker:       sqsbroker.New(c, &sqsbroker.Options{Machinery: true, NoCreate: true}),
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
