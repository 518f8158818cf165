package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	sqsbroker "github.com/errand-go/errand/brokers/sqs"
)

func sqsClient() *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(os.Getenv("ERRAND_SQS_ENDPOINT")),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, sqsbroker.RequestBodyWorkaround) // the raw floor too: the SDK bug it works around stalls any client (docs/sqs.md)
}

// sqsServer is errand on the SQS broker with the Redis backend.
func sqsServer(r *report, c *awssqs.Client) (*errand.Server, string) {
	p := "bench-" + rand.Text()[:8]
	srv, _ := errand.NewServer(errand.Config{
		Broker:       sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: p + "-"}),
		Backend:      redisbackend.New(r.rdb, &redisbackend.Options{Prefix: p, ResultExpiry: 10 * time.Minute}),
		DefaultQueue: "q",
	})
	return srv, p
}

func rawQueue(ctx context.Context, c *awssqs.Client) (string, error) {
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("bench-raw-" + rand.Text()[:8])})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

func rawSendBatches(ctx context.Context, c *awssqs.Client, u string, n int) error {
	for lo := 0; lo < n; lo += 10 {
		var es []types.SendMessageBatchRequestEntry
		for i := lo; i < min(lo+10, n); i++ {
			es = append(es, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i - lo)), MessageBody: aws.String(strconv.Itoa(i))})
		}
		if _, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(u), Entries: es}); err != nil {
			return err
		}
	}
	return nil
}

func sqsScenarios(r *report) error {
	if os.Getenv("ERRAND_SQS_ENDPOINT") == "" {
		return nil
	}
	ctx, cancel := ctxTimeout()
	defer cancel()
	c := sqsClient()
	total := *n / 4
	// Enqueue, single producer.
	sc := fmt.Sprintf("SQS enqueue %d, single producer", total)
	u, err := rawQueue(ctx, c)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for i := range total {
		if _, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: aws.String(strconv.Itoa(i))}); err != nil {
			return err
		}
	}
	const floorOne = "raw SendMessage"
	r.add(sc, floorOne, rate(total, time.Since(t0)), "msgs/s")
	srv, _ := sqsServer(r, c)
	t0 = time.Now()
	for i := range total {
		if _, err := srv.SendTask(ctx, errand.NewSignature("noop", i)); err != nil {
			return err
		}
	}
	r.compare(sc, "errand SendTask (SQS broker, Redis backend)", rate(total, time.Since(t0)), "tasks/s", floorOne, "")

	// Enqueue, batch.
	sc = fmt.Sprintf("SQS enqueue %d, batch", total)
	if u, err = rawQueue(ctx, c); err != nil {
		return err
	}
	t0 = time.Now()
	if err := rawSendBatches(ctx, c, u, total); err != nil {
		return err
	}
	const floorBatch = "raw SendMessageBatch (10)"
	r.add(sc, floorBatch, rate(total, time.Since(t0)), "msgs/s")
	srv, _ = sqsServer(r, c)
	sigs := make([]*errand.Signature, total)
	for i := range sigs {
		sigs[i] = errand.NewSignature("noop", i)
	}
	g, _ := errand.NewGroup(sigs...)
	t0 = time.Now()
	if _, err := srv.SendGroup(ctx, g, errand.SendConcurrency(4)); err != nil {
		return err
	}
	r.compare(sc, "errand SendGroup (SQS broker, Redis backend)", rate(total, time.Since(t0)), "tasks/s", floorBatch, "")

	for _, w := range []int{10, 50} {
		if err := sqsDrain(ctx, r, c, total, w); err != nil {
			return err
		}
	}
	srv, _ = sqsServer(r, c)
	return latencyOn(r, "errand SQS (fauxqs)", srv)
}

func sqsDrain(ctx context.Context, r *report, c *awssqs.Client, total, w int) error {
	sc := fmt.Sprintf("SQS drain %d no-op, %d workers", total, w)
	u, err := rawQueue(ctx, c)
	if err != nil {
		return err
	}
	if err := rawSendBatches(ctx, c, u, total); err != nil {
		return err
	}
	o := newOnce(total)
	dctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t0 := time.Now()
	// Floor: receive 10, delete them in one batch; w/10 pollers (at least 1).
	for range max(w/10, 1) {
		wg.Go(func() {
			for dctx.Err() == nil {
				out, err := c.ReceiveMessage(context.WithoutCancel(dctx), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(u), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 30})
				if err != nil || len(out.Messages) == 0 {
					continue
				}
				var del []types.DeleteMessageBatchRequestEntry
				for i, m := range out.Messages {
					o.mark(aws.ToString(m.Body))
					del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
				}
				c.DeleteMessageBatch(context.WithoutCancel(dctx), &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(u), Entries: del})
			}
		})
	}
	err = o.wait(ctx)
	d := time.Since(t0)
	stop()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("raw SQS drain: %w", err)
	}
	const floor = "raw ReceiveMessage(10) + DeleteMessageBatch"
	r.add(sc, floor, rate(total, d), "tasks/s")

	srv, _ := sqsServer(r, c)
	if d, err = errandDrain(ctx, srv, total, w, nil); err != nil {
		return err
	}
	r.compare(sc, "errand SQS broker + Redis backend, states recorded", rate(total, d), "tasks/s", floor, "≥ 0.7×")
	return nil
}
