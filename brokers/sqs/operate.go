package sqsbroker

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/errand-go/errand/driver"
)

// Of the operator's capabilities (driver/operate.go) SQS allows the queue
// listing only; see docs/sqs.md, "Operating", for what it does not allow
// and why (no archive, no listing by state, no pause, no heartbeats).
var _ driver.QueueLister = (*Broker)(nil)

// listPage is ListQueues' page size (SQS's maximum).
const listPage = 1000

// plainName is what queueName makes of a routing key before the FIFO
// suffix: only characters SQS allows in a standard queue's name.
var plainName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// remember records that the SQS queue name carries errand queue queue, so
// Queues lists the key as it was given where queueName changed it.
func (b *Broker) remember(name, queue string) {
	b.mu.Lock()
	b.names[name] = queue
	b.mu.Unlock()
}

// Queues lists the errand queues of this broker's naming that exist on SQS:
// the queues under Options.QueuePrefix (standard or FIFO as the broker is),
// from ListQueues, a page of 1000 at a time. A queue exists from its first
// use (publish, fetch, stats, ...) until an operator deletes it; deleting it
// on real SQS takes up to 60 seconds to show. The dead-letter queues the
// broker creates (NAME-dead, NAME-dead.fifo) are not listed, so a routing key ending in
// "-dead" is not listed either (its SQS queue would be the dead-letter queue
// of the key without the suffix: do not use such keys).
//
// A key is listed as SQS holds it: the name less prefix and ".fifo". Where
// queueName changed the key (characters outside [A-Za-z0-9_-], or a name
// too long, which keeps a hash), the listed name is the key as this broker
// last used it, or, for a queue this Broker has not used, the SQS form,
// which addresses the same SQS queue (Stats, Purge, Fetch and Publish on it
// reach the queue of the original key).
//
// One ListQueues call per 1000 queues, each bounded by Options.CallTimeout;
// safe for concurrent use; nothing is retried beyond the SDK's own retries.
func (b *Broker) Queues(ctx context.Context) ([]string, error) {
	prefix := badChars.ReplaceAllString(b.opts.QueuePrefix, "-")
	in := &sqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), MaxResults: aws.Int32(listPage)}
	var out []string
	for {
		cctx, cancel := b.bound(ctx)
		page, err := b.client.ListQueues(cctx, in)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("sqs broker: list queues %s*: %w", prefix, err)
		}
		for _, u := range page.QueueUrls {
			if q, ok := b.errandQueue(prefix, path.Base(u)); ok {
				out = append(out, q)
			}
		}
		if aws.ToString(page.NextToken) == "" {
			return out, nil
		}
		in.NextToken = page.NextToken
	}
}

// errandQueue maps the SQS queue name back to the errand queue it carries,
// false for a name this broker does not make a queue of: a dead-letter
// queue, a FIFO queue for a standard broker or the reverse, a name with
// another prefix.
func (b *Broker) errandQueue(prefix, name string) (string, bool) {
	plain := name
	if b.opts.FIFO {
		var ok bool
		if plain, ok = strings.CutSuffix(name, ".fifo"); !ok {
			return "", false
		}
	}
	if !plainName.MatchString(plain) || strings.HasSuffix(plain, "-dead") {
		// Dead letters (x-dead, x-dead.fifo), or another broker's FIFO
		// queue or an earlier version's FIFO dead letters (x.fifo-dead).
		return "", false
	}
	key, ok := strings.CutPrefix(plain, prefix)
	if !ok || key == "" {
		return "", false
	}
	b.mu.Lock()
	q, known := b.names[name]
	b.mu.Unlock()
	if known {
		return q, true
	}
	return key, true
}
