package sqsbroker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

var badChars = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// queueName maps a routing key to a valid SQS name (at most 80 characters
// of [a-zA-Z0-9_-], and ".fifo" for a FIFO queue); long keys keep a hash so
// they stay distinct. The base is at most 70 characters, which leaves room
// for "-dead" and ".fifo" (deadName) within SQS's 80.
func (b *Broker) queueName(queue string) string {
	n := badChars.ReplaceAllString(b.opts.QueuePrefix+queue, "-")
	if len(n) > 70 {
		h := sha256.Sum256([]byte(n))
		n = n[:60] + "-" + hex.EncodeToString(h[:4])
	}
	if b.opts.FIFO {
		n += ".fifo"
	}
	b.remember(n, queue)
	return n
}

// deadName is the name of the dead-letter queue of the queue named name:
// NAME-dead for a standard queue, NAME-dead.fifo for the FIFO queue
// NAME.fifo (SQS allows a dot only in the ".fifo" suffix, and a FIFO
// queue's dead-letter queue must be FIFO too). Versions before this one
// named it NAME.fifo-dead, a name only emulators accept.
func deadName(name string) string {
	if base, ok := strings.CutSuffix(name, ".fifo"); ok {
		return base + "-dead.fifo"
	}
	return name + "-dead"
}

// url returns the queue's URL, from the cache or by GetQueueUrl, creating
// the queue where allowed. It may be called concurrently; concurrent
// creations of one queue are harmless (CreateQueue with the same attributes
// returns the existing queue).
func (b *Broker) url(ctx context.Context, name string) (string, error) {
	b.mu.Lock()
	u, ok := b.urls[name]
	b.mu.Unlock()
	if ok {
		return u, nil
	}
	cctx, cancel := b.bound(ctx)
	out, err := b.client.GetQueueUrl(cctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	cancel()
	switch {
	case err == nil:
		u = aws.ToString(out.QueueUrl)
	case !queueMissing(err):
		return "", fmt.Errorf("sqs broker: queue %s: %w", name, err)
	case b.opts.NoCreate:
		b.mu.Lock()
		known := b.known[name]
		b.mu.Unlock()
		if known {
			return "", fmt.Errorf("sqs broker: queue %s no longer exists (deleted since this broker last used it) and Options.NoCreate is set (create=false): recreate it, and %s if it had one, or let the broker create its queues: %w", name, deadName(name), err)
		}
		return "", fmt.Errorf("sqs broker: queue %s does not exist and Options.NoCreate is set (create=false): create it first: %w", name, err)
	default:
		if u, err = b.create(ctx, name); err != nil {
			return "", err
		}
	}
	b.mu.Lock()
	b.urls[name] = u
	b.known[name] = true
	b.mu.Unlock()
	return u, nil
}

// create makes the queue named name: a FIFO queue when the name ends in
// .fifo, with SQS's defaults otherwise. A queue recreated after a deletion
// gets these same attributes.
func (b *Broker) create(ctx context.Context, name string) (string, error) {
	in := &sqs.CreateQueueInput{QueueName: aws.String(name)}
	if strings.HasSuffix(name, ".fifo") {
		in.Attributes = map[string]string{string(types.QueueAttributeNameFifoQueue): "true"}
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	out, err := b.client.CreateQueue(ctx, in)
	if err != nil {
		var recent *types.QueueDeletedRecently
		if errors.As(err, &recent) || hasCode(err, "QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently") {
			return "", fmt.Errorf("sqs broker: queue %s was deleted and SQS refuses to create it again until 60 seconds after the deletion; calls on it fail until then: %w", name, err)
		}
		return "", fmt.Errorf("sqs broker: create queue %s: %w", name, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// forget drops the cached URL u of the queue named name (a newer entry
// stays).
func (b *Broker) forget(name, u string) {
	b.mu.Lock()
	if b.urls[name] == u {
		delete(b.urls, name)
	}
	b.mu.Unlock()
}

// withQueue runs call with the URL of the queue named name. When SQS answers
// that the queue does not exist — deleted since the broker looked it up, by
// an operator or by a server that restarted empty — the cached URL is
// dropped, the queue is looked up again and, unless Options.NoCreate,
// created again as at its first use; then call runs once more. With
// NoCreate a queue still missing is one error naming it and saying it no
// longer exists (url's).
func (b *Broker) withQueue(ctx context.Context, name string, call func(u string) error) error {
	u, err := b.url(ctx, name)
	if err != nil {
		return err
	}
	err = call(u)
	if !queueMissing(err) {
		return err
	}
	b.forget(name, u)
	if u, err = b.url(ctx, name); err != nil {
		return err
	}
	if err = call(u); queueMissing(err) {
		var ae smithy.APIError
		errors.As(err, &ae) // the service's own error, without call's wording
		return fmt.Errorf("sqs broker: queue %s was deleted and is still missing after the broker looked it up again (real SQS may take a second to serve a queue it just created; the next call tries again): %w", name, ae)
	}
	return err
}

// queueMissing reports whether err is SQS's "the queue does not exist".
// Over the JSON protocol SQS names it QueueDoesNotExist; with the query
// compatibility header (and over the query protocol) it is
// AWS.SimpleQueueService.NonExistentQueue.
func queueMissing(err error) bool {
	if err == nil {
		return false
	}
	var nf *types.QueueDoesNotExist
	return errors.As(err, &nf) || hasCode(err, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "NonExistentQueue")
}

func hasCode(err error, codes ...string) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	for _, c := range codes {
		if ae.ErrorCode() == c {
			return true
		}
	}
	return false
}
