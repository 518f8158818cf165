package sqsbroker_test

// Issue 15, item 8: queues deleted under a running system (an SQS server
// that restarted empty, an operator's DeleteQueue) must come back, or fail
// with one clear error; never a silent stall of senders and workers.

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/conformance"
	"github.com/errand-go/errand/driver"
)

// TestQueueDeletedUnderRunningSystem: a producer and a running worker, each
// with its own broker as in separate processes, use a queue and its
// dead-letter queue; both are deleted with the SDK's DeleteQueue. The
// worker's receive loop must notice and bring the queue back by itself (not
// stall until a producer does), the producer's SendTask must go through, and
// tasks sent after the deletion must complete on the worker that ran all
// along; a malformed message must again land in the dead-letter queue.
func TestQueueDeletedUnderRunningSystem(t *testing.T) {
	c := client(t)
	for _, fifo := range []bool{false, true} {
		name := "Standard"
		if fifo {
			name = "FIFO"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), scaled(90*time.Second))
			defer cancel()
			prefix := "errand-test-del-" + rand.Text()[:8] + "-"
			queue, dead := queueNames(prefix, "q", fifo)
			defer deleteQueues(c, queue, dead)
			backend := memorybackend.New(nil)
			server := func() *errand.Server {
				b := sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: prefix, FIFO: fifo})
				t.Cleanup(func() { b.Close() })
				srv, err := errand.NewServer(errand.Config{Broker: b, Backend: backend, DefaultQueue: "q"})
				if err != nil {
					t.Fatal(err)
				}
				srv.Register("echo", func(s string) (string, error) { return s, nil })
				return srv
			}
			producer, consumer := server(), server()
			w := consumer.NewWorker(errand.WorkerConfig{Concurrency: 4, Lease: 5 * time.Second, ErrorBackoff: 200 * time.Millisecond})
			w.Start()
			defer w.Shutdown(context.Background())

			echo(ctx, t, producer, "before the deletion")
			setAside(ctx, t, c, producer, dead, "malformed-1")

			for _, q := range []string{queue, dead} {
				u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(q)})
				if err != nil {
					t.Fatalf("queue %s should exist before the deletion: %v", q, err)
				}
				if _, err := c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: u.QueueUrl}); err != nil {
					t.Fatalf("DeleteQueue %s: %v", q, err)
				}
			}

			// Nothing is sent yet: only the worker's own fetch can bring
			// the queue back.
			if !exists(ctx, c, queue) {
				t.Fatalf("missing-queue promise broken: the running worker never recreated its deleted queue %s: its receive loop stalls", queue)
			}
			// Tasks sent after the deletion (through the producer's stale
			// URL) complete on the worker that was running all along.
			var wg sync.WaitGroup
			for i := range 5 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					echo(ctx, t, producer, "after the deletion "+string(rune('a'+i)))
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			// The dead-letter queue comes back too.
			setAside(ctx, t, c, producer, dead, "malformed-2")
		})
	}
}

// TestQueueDeletedProducerAlone: with no worker running, a producer whose
// queue was deleted since its last send recreates it (a FIFO queue as a
// FIFO queue) and its message arrives.
func TestQueueDeletedProducerAlone(t *testing.T) {
	c := client(t)
	for _, fifo := range []bool{false, true} {
		name := "Standard"
		if fifo {
			name = "FIFO"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), scaled(30*time.Second))
			defer cancel()
			prefix := "errand-test-delp-" + rand.Text()[:8] + "-"
			queue, _ := queueNames(prefix, "q", fifo)
			defer deleteQueues(c, queue)
			b := sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: prefix, FIFO: fifo})
			defer b.Close()
			publish := func(id string) {
				t.Helper()
				if err := b.Publish(ctx, errand.Message{ID: id, Queue: "q", Body: []byte(`{"id":"` + id + `"}`)}); err != nil {
					t.Fatalf("missing-queue promise broken: Publish(%s) failed: %v; a deleted queue the broker created must be recreated", id, err)
				}
			}
			publish("before")
			u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(queue)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: u.QueueUrl}); err != nil {
				t.Fatal(err)
			}
			publish("after")
			u, err = c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(queue)})
			if err != nil {
				t.Fatalf("missing-queue promise broken: Publish succeeded but queue %s does not exist: %v", queue, err)
			}
			attrs, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
			if err != nil {
				t.Fatal(err)
			}
			if got := attrs.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true"; got != fifo {
				t.Fatalf("missing-queue promise broken: queue %s recreated with FifoQueue=%v, want %v (the attributes of its first creation)", queue, got, fifo)
			}
			ds, err := b.Fetch(ctx, "q", 10, 5*time.Second)
			if err != nil || len(ds) != 1 || ds[0].ID != "after" {
				t.Fatalf("missing-queue promise broken: the message published to the recreated queue did not arrive: %v, %v", ds, err)
			}
			// A message held when its queue is deleted is gone with it:
			// settling it says so.
			if _, err := c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: u.QueueUrl}); err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(b.Ack(ctx, ds[:1])...); !errors.Is(err, driver.ErrLeaseLost) || !strings.Contains(err.Error(), "no longer exists") {
				t.Fatalf("missing-queue promise broken: acking a message whose queue was deleted returned %v; want ErrLeaseLost saying the queue no longer exists", err)
			}
			publish("after the second deletion")
		})
	}
}

// exists polls until the queue named name exists or ctx ends.
func exists(ctx context.Context, c *awssqs.Client, name string) bool {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)}); err == nil {
			return true
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return false
		}
	}
}

// TestQueueDeletedNoCreate: with Options.NoCreate the broker does not
// recreate a deleted queue; Publish and Fetch fail with one error naming the
// queue and saying it no longer exists, and a running worker reports it
// (through ErrorHandler) instead of stalling in silence.
func TestQueueDeletedNoCreate(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(context.Background(), scaled(60*time.Second))
	defer cancel()
	prefix := "errand-test-nocreate-" + rand.Text()[:8] + "-"
	queue, _ := queueNames(prefix, "q", false)
	if _, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(queue)}); err != nil {
		t.Fatal(err)
	}
	defer deleteQueues(c, queue)
	b := sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: prefix, NoCreate: true})
	defer b.Close()
	srv, err := errand.NewServer(errand.Config{Broker: b, Backend: memorybackend.New(nil), DefaultQueue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register("echo", func(s string) (string, error) { return s, nil })
	reported := make(chan error, 100)
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 2, Lease: 5 * time.Second, ErrorBackoff: 200 * time.Millisecond,
		ErrorHandler: func(err error) {
			select {
			case reported <- err:
			default:
			}
		}})
	w.Start()
	defer w.Shutdown(context.Background())
	echo(ctx, t, srv, "before the deletion")

	u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: u.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	clear := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), queue) || !strings.Contains(err.Error(), "no longer exists") {
			t.Fatalf("missing-queue promise broken (NoCreate): %s on a deleted queue returned %v; want one error naming queue %s and saying it no longer exists", what, err, queue)
		}
	}
	_, err = srv.SendTask(ctx, errand.NewSignature("echo", "after the deletion"))
	clear("SendTask", err)
	_, err = b.Fetch(ctx, "q", 1, 5*time.Second)
	clear("Fetch", err)
	for {
		select {
		case err := <-reported:
			if strings.Contains(err.Error(), "NoCreate") { // the fetch's error, not an ack's
				clear("the running worker's fetch", err)
				if _, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(queue)}); err == nil {
					t.Fatalf("NoCreate promise broken: queue %s was recreated by the broker", queue)
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("missing-queue promise broken (NoCreate): the running worker reported no error naming the deleted queue %s: a silent stall", queue)
		}
	}
}

// queueNames returns the SQS names the broker gives routing key key and its
// dead-letter queue.
func queueNames(prefix, key string, fifo bool) (queue, dead string) {
	if fifo {
		return prefix + key + ".fifo", prefix + key + "-dead.fifo"
	}
	return prefix + key, prefix + key + "-dead"
}

func echo(ctx context.Context, t *testing.T, srv *errand.Server, s string) {
	t.Helper()
	r, err := srv.SendTask(ctx, errand.NewSignature("echo", s))
	if err != nil {
		t.Errorf("missing-queue promise broken: SendTask(%q) failed: %v; a deleted queue the broker created must be recreated", s, err)
		return
	}
	var got string
	if err := r.GetInto(ctx, &got); err != nil || got != s {
		t.Errorf("missing-queue promise broken: task %q sent to the recreated queue did not complete on the running worker: %q, %v", s, got, err)
	}
}

// setAside publishes a malformed message and waits for it in the dead-letter
// queue dead.
func setAside(ctx context.Context, t *testing.T, c *awssqs.Client, srv *errand.Server, dead, id string) {
	t.Helper()
	if err := srv.Broker().Publish(ctx, errand.Message{ID: id, Queue: "q", Body: []byte("not a signature")}); err != nil {
		t.Fatalf("publish a malformed message: %v", err)
	}
	// The worker creates the dead-letter queue at its first reject.
	if !exists(ctx, c, dead) {
		t.Fatalf("bad-input promise broken: the dead-letter queue %s never appeared for malformed message %s", dead, id)
	}
	u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(dead)})
	if err != nil {
		t.Fatal(err)
	}
	for ctx.Err() == nil {
		out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: u.QueueUrl, WaitTimeSeconds: 1, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatalf("receive from %s: %v", dead, err)
		}
		for _, m := range out.Messages {
			if a, ok := m.MessageAttributes["errand-id"]; ok && aws.ToString(a.StringValue) == id {
				c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: u.QueueUrl, ReceiptHandle: m.ReceiptHandle})
				return
			}
		}
	}
	t.Fatalf("bad-input promise broken: malformed message %s never reached the dead-letter queue %s", id, dead)
}

func deleteQueues(c *awssqs.Client, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range names {
		if u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(n)}); err == nil {
			c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: u.QueueUrl})
		}
	}
}

// scaled multiplies d by ERRAND_CONFORMANCE_TIMEOUT_SCALE.
func scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv(conformance.ScaleEnv), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}
