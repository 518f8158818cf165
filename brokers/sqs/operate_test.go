package sqsbroker_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	sqsbroker "github.com/errand-go/errand/brokers/sqs"
	"github.com/errand-go/errand/driver"
)

// TestQueuesListsQueuesNotDeadLetters: Queues lists every queue published
// to under the broker's prefix, by the keys given (even those queueName
// sanitizes or hashes), and neither the dead-letter queues the broker
// creates nor the queues of a broker of the other kind (FIFO or standard)
// sharing the prefix. Another Broker (another process) lists the SQS form
// of changed keys, which must address the same SQS queues.
func TestQueuesListsQueuesNotDeadLetters(t *testing.T) {
	c := client(t)
	ctx, cancel := context.WithTimeout(context.Background(), scaled(60*time.Second))
	defer cancel()
	prefix := "errand-test-ql-" + rand.Text()[:8] + "-"
	t.Cleanup(func() { deletePrefix(c, prefix) })
	long := "long-" + strings.Repeat("x", 80)
	std := sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: prefix})
	fifo := sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: prefix, FIFO: true})
	defer std.Close()
	defer fifo.Close()

	publish := func(b *sqsbroker.Broker, queue string, n int) {
		t.Helper()
		for i := range n {
			if err := b.Publish(ctx, driver.Message{ID: rand.Text(), Queue: queue, Body: []byte(`{"i":` + string(rune('0'+i)) + `}`)}); err != nil {
				t.Fatalf("Publish to %s: %v", queue, err)
			}
		}
	}
	reject := func(b *sqsbroker.Broker, queue string) {
		t.Helper()
		ds, err := b.Fetch(ctx, queue, 1, time.Minute)
		if err != nil || len(ds) != 1 {
			t.Fatalf("Fetch from %s: %v, %v", queue, ds, err)
		}
		if err := b.Reject(ctx, ds[0], "test"); err != nil {
			t.Fatalf("Reject: %v", err)
		}
	}
	publish(std, "alpha", 2)
	publish(std, "emails.high", 1)
	publish(std, long, 1)
	reject(std, "alpha") // alpha-dead exists from here
	publish(fifo, "beta", 2)
	reject(fifo, "beta") // beta-dead.fifo

	for _, dead := range []string{prefix + "alpha-dead", prefix + "beta-dead.fifo"} {
		if _, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(dead)}); err != nil {
			t.Fatalf("dead-letter queue %s missing after Reject (the test needs it): %v", dead, err)
		}
	}

	queues := func(b *sqsbroker.Broker) []string {
		t.Helper()
		qs, err := b.Queues(ctx)
		if err != nil {
			t.Fatalf("Queues: %v", err)
		}
		slices.Sort(qs)
		return qs
	}
	const promise = "queue listing (the queues published to, by their keys; no dead-letter queues)"
	if got, want := queues(std), []string{"alpha", "emails.high", long}; !slices.Equal(got, want) {
		t.Errorf("%s promise broken: standard broker's Queues = %q, want %q", promise, got, want)
	}
	if got, want := queues(fifo), []string{"beta"}; !slices.Equal(got, want) {
		t.Errorf("%s promise broken: FIFO broker's Queues = %q, want %q", promise, got, want)
	}

	// Another process: the SQS forms, each reaching the same queue.
	other := sqsbroker.New(c, &sqsbroker.Options{QueuePrefix: prefix, NoCreate: true})
	defer other.Close()
	got := queues(other)
	if len(got) != 3 || !slices.Contains(got, "alpha") || !slices.Contains(got, "emails-high") {
		t.Fatalf("%s promise broken: a fresh broker's Queues = %q, want alpha, emails-high and the hashed form of the long key", promise, got)
	}
	for _, q := range got {
		st, err := other.Stats(ctx, q) // NoCreate: a name reaching no queue fails
		if err != nil || st.Pending+st.InFlight != 1 {
			t.Errorf("%s promise broken: listed %q does not address the queue published to: Stats = %+v, %v; want the one message there", promise, q, st, err)
		}
	}
}

// TestQueuesPaginates: Queues follows ListQueues' NextToken to the last page
// (fauxqs returns one page whatever MaxResults, so a stand-in server answers
// here, in SQS's JSON protocol).
func TestQueuesPaginates(t *testing.T) {
	pages := [][]string{{"p-a", "p-b-dead"}, {"p-c"}, {"p-d"}}
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") != "AmazonSQS.ListQueues" {
			http.Error(w, "unexpected "+r.Header.Get("X-Amz-Target"), http.StatusBadRequest)
			return
		}
		var in struct {
			QueueNamePrefix string
			MaxResults      int
			NextToken       string
		}
		json.NewDecoder(r.Body).Decode(&in)
		if in.QueueNamePrefix != "p-" || in.MaxResults != 1000 {
			t.Errorf("ListQueues asked for prefix %q, %d results; want p-, 1000", in.QueueNamePrefix, in.MaxResults)
		}
		i := 0
		if in.NextToken != "" {
			i = int(in.NextToken[0] - '0')
		}
		calls++
		out := map[string]any{}
		var urls []string
		for _, n := range pages[i] {
			urls = append(urls, "http://sqs.local/000000000000/"+n)
		}
		out["QueueUrls"] = urls
		if i+1 < len(pages) {
			out["NextToken"] = string(rune('0' + i + 1))
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	b := sqsbroker.New(newClient(srv.URL), &sqsbroker.Options{QueuePrefix: "p-"})
	defer b.Close()
	qs, err := b.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "c", "d"}; !slices.Equal(qs, want) || calls != 3 {
		t.Errorf("queue listing promise broken: Queues over 3 pages = %q in %d calls, want %q in 3 (every page, no dead-letter queue)", qs, calls, want)
	}
}

// deletePrefix deletes every queue whose name starts with prefix.
func deletePrefix(c *awssqs.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), MaxResults: aws.Int32(1000)})
	if err != nil {
		return
	}
	for _, u := range out.QueueUrls {
		c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
	}
}
