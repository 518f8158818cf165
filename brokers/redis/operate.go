package redisbroker

import (
	"context"
	"time"
)

// The calls below return when ctx is cancelled even while Redis is silent
// (see honourCancel): errand's worker polls Paused and beats in the
// background, and its Shutdown must not wait for them.

// Queues returns every queue published to: the set P:queues, which
// Publish adds to in its own round trip.
func (b *Broker) Queues(ctx context.Context) ([]string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	qs, err := honourCancel(ctx, func() ([]string, error) { return b.rdb.SMembers(ctx, b.global("queues")).Result() })
	return qs, b.err(ctx, err)
}

// Pause adds queue to the set of paused queues (P:paused), which lasts
// until Resume. Fetch does not read it; errand's workers poll Paused.
func (b *Broker) Pause(ctx context.Context, queue string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (int64, error) { return b.rdb.SAdd(ctx, b.global("paused"), queue).Result() })
	return b.err(ctx, err)
}

// Resume removes queue from the set of paused queues.
func (b *Broker) Resume(ctx context.Context, queue string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (int64, error) { return b.rdb.SRem(ctx, b.global("paused"), queue).Result() })
	return b.err(ctx, err)
}

// Paused returns the paused queues.
func (b *Broker) Paused(ctx context.Context) ([]string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	qs, err := honourCancel(ctx, func() ([]string, error) { return b.rdb.SMembers(ctx, b.global("paused")).Result() })
	return qs, b.err(ctx, err)
}

// Beat stores data for worker id in P:workers with its expiry (now + ttl
// by the server's clock) in P:beats, in one script that also drops the
// workers whose ttl ran out.
func (b *Broker) Beat(ctx context.Context, id string, data []byte, ttl time.Duration) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (any, error) {
		return beatScript.Run(ctx, b.rdb, b.beatKeys(), id, data, ttl.Milliseconds()).Result()
	})
	return b.err(ctx, err)
}

// Beats drops the workers whose ttl ran out and returns the data of the
// others, in one script.
func (b *Broker) Beats(ctx context.Context) ([][]byte, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	ss, err := honourCancel(ctx, func() ([]string, error) { return beatsScript.Run(ctx, b.rdb, b.beatKeys()).StringSlice() })
	if err != nil {
		return nil, b.err(ctx, err)
	}
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out, nil
}

// Unbeat removes worker id at once.
func (b *Broker) Unbeat(ctx context.Context, id string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := honourCancel(ctx, func() (any, error) {
		return unbeatScript.Run(ctx, b.rdb, b.beatKeys(), id).Result()
	})
	return b.err(ctx, err)
}

func (b *Broker) beatKeys() []string { return []string{b.global("workers"), b.global("beats")} }
