package sqsbroker_test

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/driver"
)

// intercept is a client option that calls f with every call's input
// before it is sent; an error from f fails the call without sending it.
func intercept(f func(params any) error) func(*awssqs.Options) {
	return func(o *awssqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("errand-test-intercept",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if err := f(in.Parameters); err != nil {
						return middleware.InitializeOutput{}, middleware.Metadata{}, err
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
}

// TestCreatedQueueNamesValid: every queue name the broker sends SQS (to
// create or look up a queue and its dead-letter queue), standard and FIFO,
// for plain, dotted and long keys, satisfies SQS's naming rules, checked
// on the client since fauxqs accepts names SQS refuses.
func TestCreatedQueueNamesValid(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(context.Background(), scaled(60*time.Second))
	defer cancel()
	var mu sync.Mutex
	names := map[string]bool{}
	fc := awssqs.New(c.Options(), intercept(func(params any) error {
		mu.Lock()
		defer mu.Unlock()
		switch in := params.(type) {
		case *awssqs.CreateQueueInput:
			names[*in.QueueName] = true
		case *awssqs.GetQueueUrlInput:
			names[*in.QueueName] = true
		}
		return nil
	}))
	prefix := "errand-test-nm-" + rand.Text()[:8] + "-"
	t.Cleanup(func() { deletePrefix(c, prefix) })
	keys := []string{"a", "emails.high", strings.Repeat("x", 70-len(prefix)), strings.Repeat("y", 100)}
	for _, fifo := range []bool{false, true} {
		b := sqsbroker.New(fc, &sqsbroker.Options{QueuePrefix: prefix, FIFO: fifo})
		defer b.Close()
		for _, key := range keys {
			if err := b.Publish(ctx, driver.Message{ID: rand.Text(), Queue: key, Body: []byte(`{}`)}); err != nil {
				t.Fatalf("Publish to %q (FIFO %v): %v", key, fifo, err)
			}
			ds, err := b.Fetch(ctx, key, 1, time.Minute)
			if err != nil || len(ds) != 1 {
				t.Fatalf("Fetch from %q (FIFO %v): %v, %v", key, fifo, ds, err)
			}
			if err := b.Reject(ctx, ds[0], "test"); err != nil {
				t.Fatalf("Reject (FIFO %v, key %q): %v", fifo, key, err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var fifoDead int
	for name := range names {
		fifo := strings.HasSuffix(name, ".fifo")
		if err := sqsbroker.ValidQueueName(name, fifo); err != nil {
			t.Errorf("queue naming promise broken: the broker sent SQS a name it refuses: %v", err)
		}
		if fifo && strings.HasSuffix(name, "-dead.fifo") {
			fifoDead++
		}
	}
	if fifoDead != len(keys) {
		t.Errorf("queue naming promise broken: %d FIFO dead-letter queues (NAME-dead.fifo) among %v, want %d", fifoDead, names, len(keys))
	}
}
