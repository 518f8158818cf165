package sqs

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// ackWindow is how long an Ack waits for others to share its
// DeleteMessageBatch call (at most 10 entries).
const ackWindow = 2 * time.Millisecond

type ackReq struct {
	h    handle
	done chan error
}

// acks batches deletes per queue: an Ack joins the queue's pending batch,
// which is sent when it holds 10 entries or ackWindow after its first entry,
// and waits for its own entry's result.
type acks struct {
	mu      sync.Mutex
	pending map[string][]ackReq
}

func (b *Broker) batchDelete(ctx context.Context, h handle) error {
	req := ackReq{h: h, done: make(chan error, 1)}
	b.acks.mu.Lock()
	if b.acks.pending == nil {
		b.acks.pending = map[string][]ackReq{}
	}
	batch := append(b.acks.pending[h.url], req)
	b.acks.pending[h.url] = batch
	switch len(batch) {
	case 10:
		delete(b.acks.pending, h.url)
		b.acks.mu.Unlock()
		go b.flush(h.url, batch)
	case 1:
		b.acks.mu.Unlock()
		time.AfterFunc(ackWindow, func() { b.flushQueue(h.url, req) })
	default:
		b.acks.mu.Unlock()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flushQueue sends the queue's pending batch if first is still in it.
func (b *Broker) flushQueue(url string, first ackReq) {
	b.acks.mu.Lock()
	batch := b.acks.pending[url]
	if len(batch) == 0 || batch[0].done != first.done {
		b.acks.mu.Unlock()
		return // already sent as a full batch
	}
	delete(b.acks.pending, url)
	b.acks.mu.Unlock()
	b.flush(url, batch)
}

func (b *Broker) flush(url string, batch []ackReq) {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(batch))
	for i, r := range batch {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.h.receipt)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := b.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	if err != nil {
		for _, r := range batch {
			r.done <- b.leaseErr(err, r.h.msg.ID)
		}
		return
	}
	failed := map[int]types.BatchResultErrorEntry{}
	for _, f := range out.Failed {
		i, _ := strconv.Atoi(aws.ToString(f.Id))
		failed[i] = f
	}
	for i, r := range batch {
		f, bad := failed[i]
		if !bad {
			r.done <- nil
			continue
		}
		r.done <- b.leaseErr(&batchEntryError{code: aws.ToString(f.Code), msg: aws.ToString(f.Message)}, r.h.msg.ID)
	}
}

// batchEntryError is one failed entry of a batch call, as a smithy.APIError
// so leaseErr maps its code.
type batchEntryError struct{ code, msg string }

func (e *batchEntryError) Error() string                 { return fmt.Sprintf("%s: %s", e.code, e.msg) }
func (e *batchEntryError) ErrorCode() string             { return e.code }
func (e *batchEntryError) ErrorMessage() string          { return e.msg }
func (e *batchEntryError) ErrorFault() smithy.ErrorFault { return smithy.FaultUnknown }
