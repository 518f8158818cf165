package sqsbroker

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/errand-go/errand/driver"
)

// Ack deletes ds: a lone delivery with DeleteMessage, more with one
// DeleteMessageBatch call per queue URL and run of ten (errand sends at
// most Limits().MaxAckBatch, 10, at a time, all of one queue). It answers
// one error per delivery: ErrLeaseLost where SQS reports its receipt
// handle invalid (a stale handle's delete usually succeeds: see the
// package doc).
func (b *Broker) Ack(ctx context.Context, ds []*driver.Delivery) []error {
	if len(ds) == 1 {
		h, err := b.handle(ds[0])
		if err == nil {
			err = b.del(ctx, h)
		}
		if err != nil {
			return []error{err}
		}
		return nil
	}
	return b.inBatches(ds, func(url string, hs []handle, idx []int, errs []error) {
		b.deleteBatch(ctx, url, hs, idx, errs)
	})
}

// inBatches groups ds by queue URL and calls batch for each run of at most
// 10 of one URL (SQS's batch limit), with hs[i] the handle of ds[i] and idx
// the indexes of the run; batch records each one's outcome in errs[i]. A
// delivery not fetched from this broker gets its error without a call.
// inBatches returns errs, one error per delivery.
func (b *Broker) inBatches(ds []*driver.Delivery, batch func(url string, hs []handle, idx []int, errs []error)) []error {
	errs := make([]error, len(ds))
	byURL := map[string][]int{}
	hs := make([]handle, len(ds))
	for i, d := range ds {
		h, err := b.handle(d)
		if err != nil {
			errs[i] = err
			continue
		}
		hs[i] = h
		byURL[h.url] = append(byURL[h.url], i)
	}
	for url, idx := range byURL {
		for len(idx) > 0 {
			n := min(len(idx), 10)
			batch(url, hs, idx[:n], errs)
			idx = idx[n:]
		}
	}
	return errs
}

// deleteBatch deletes the handles hs[i] for i in idx with one call and
// records each entry's outcome in errs[i].
func (b *Broker) deleteBatch(ctx context.Context, url string, hs []handle, idx []int, errs []error) {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(idx))
	for j, i := range idx {
		entries[j] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), ReceiptHandle: aws.String(hs[i].receipt)}
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	out, err := b.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	if err != nil {
		for _, i := range idx {
			errs[i] = b.leaseErr(err, hs[i])
		}
		return
	}
	for _, f := range out.Failed {
		j, convErr := strconv.Atoi(aws.ToString(f.Id))
		if convErr != nil || j < 0 || j >= len(idx) {
			continue
		}
		i := idx[j]
		errs[i] = b.leaseErr(&batchEntryError{code: aws.ToString(f.Code), msg: aws.ToString(f.Message)}, hs[i])
	}
}

// batchEntryError is one failed entry of a batch call, as a smithy.APIError
// so leaseErr maps its code.
type batchEntryError struct{ code, msg string }

func (e *batchEntryError) Error() string                 { return fmt.Sprintf("%s: %s", e.code, e.msg) }
func (e *batchEntryError) ErrorCode() string             { return e.code }
func (e *batchEntryError) ErrorMessage() string          { return e.msg }
func (e *batchEntryError) ErrorFault() smithy.ErrorFault { return smithy.FaultUnknown }
