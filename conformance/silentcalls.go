package conformance

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/errand-go/errand"
	"github.com/errand-go/errand/driver"
)

// SilentHarness tells RunSilentServer how to reach a driver's real server
// through a Proxy. Broker, Backend and the URL funcs are each optional; at
// least one must be set.
type SilentHarness struct {
	// Target is the real server's host:port.
	Target string
	// Broker returns a broker whose client connects to addr (the proxy in
	// front of Target), configured with CallTimeout as its per-call
	// timeout. Register its teardown with t.Cleanup.
	Broker func(t testing.TB, addr string) errand.Broker
	// Backend likewise returns a result backend on addr.
	Backend func(t testing.TB, addr string) errand.Backend
	// BrokerURL and BackendURL return a URL for errand.OpenBroker /
	// errand.OpenBackend that reaches the server at addr with CallTimeout
	// as its per-call timeout: opening it while the server is silent must
	// fail within the bound.
	BrokerURL  func(addr string) string
	BackendURL func(addr string) string
	// CallTimeout is the drivers' per-call timeout: a call whose ctx has no
	// deadline must return an error within it (plus Slack).
	CallTimeout time.Duration
	// Deadline is the ctx deadline given to calls that have one.
	// Default: 2s.
	Deadline time.Duration
	// Slack is how long after its bound a call may return. Default: 1s. A
	// broker whose receive is never cancelled mid-poll (SQS) sets its poll
	// wait plus a second: Fetch returns after the current poll.
	Slack time.Duration
}

// RunSilentServer checks that every call of a driver returns a clear
// error within the caller's bound while its server accepts connections but
// answers nothing: the proxy in front of the server is stalled after a
// first round of calls went through (connections open, queues known,
// deliveries held), then each call runs once with a ctx deadline (it must
// fail by the deadline plus Slack) and once without (it must fail within
// the driver's CallTimeout plus Slack), all at the same time. Opening a
// driver by URL is checked the same way. Broker calls: Publish, Fetch (with
// a deadline only: without one it waits for messages by contract), Ack,
// Release, Extend, Reject; backend calls: SetStates, GetState, InitGroup,
// CompleteGroupMember, ClaimChord, GroupStates.
func RunSilentServer(t *testing.T, h SilentHarness) {
	t.Run("SilentServer/EveryCallBounded", func(t *testing.T) {
		h := h.withDefaults()
		guard(t, 4*(h.Deadline+h.CallTimeout+h.Slack)+time.Minute, func() { silentCalls(t, h) })
	})
}

func (h SilentHarness) withDefaults() SilentHarness {
	if h.Deadline <= 0 {
		h.Deadline = 2 * time.Second
	}
	if h.Slack <= 0 {
		h.Slack = time.Second
	}
	h.Deadline = scaled(h.Deadline)
	h.Slack = scaled(h.Slack)
	return h
}

func scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * scale()) }

// silentCall is one call made against the silent server.
type silentCall struct {
	name     string
	deadline bool // given a ctx deadline (else none)
	call     func(ctx context.Context) error
}

func silentCalls(t testing.TB, h SilentHarness) {
	if h.CallTimeout <= 0 {
		t.Fatalf("SilentHarness.CallTimeout is not set: the kit needs the drivers' per-call timeout to bound calls without a ctx deadline")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proxy := NewProxy(t, h.Target)
	var calls []silentCall
	both := func(name string, call func(ctx context.Context) error) {
		calls = append(calls, silentCall{name, true, call}, silentCall{name, false, call})
	}

	if h.Broker != nil {
		b := h.Broker(t, proxy.Addr())
		q := name(t, "q")
		const n = 4
		for i := range n {
			if err := b.Publish(ctx, driver.Message{ID: fmt.Sprint("m", i), Queue: q, Body: []byte(fmt.Sprint(`{"n":`, i, `}`))}); err != nil {
				t.Fatalf("Publish before the server went silent: %v", err)
			}
		}
		var ds []*driver.Delivery
		for len(ds) < n {
			fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
			got, err := b.Fetch(fctx, q, n-len(ds), time.Minute)
			fcancel()
			if err != nil && ctx.Err() == nil && fctx.Err() == nil {
				t.Fatalf("Fetch before the server went silent: %v", err)
			}
			if ctx.Err() != nil {
				t.Fatalf("only %d of %d messages fetched before the server went silent", len(ds), n)
			}
			ds = append(ds, got...)
		}
		both("Broker.Publish", func(ctx context.Context) error {
			return b.Publish(ctx, driver.Message{ID: "silent", Queue: q, Body: []byte(`{}`)})
		})
		calls = append(calls, silentCall{"Broker.Fetch", true, func(ctx context.Context) error {
			_, err := b.Fetch(ctx, q, 1, time.Minute)
			return err
		}})
		both("Broker.Ack", func(ctx context.Context) error { return ackOne(ctx, b, ds[0]) })
		both("Broker.Release", func(ctx context.Context) error { return b.Release(ctx, ds[1], time.Time{}) })
		both("Broker.Extend", func(ctx context.Context) error { return b.Extend(ctx, ds[2], time.Minute) })
		both("Broker.Reject", func(ctx context.Context) error { return b.Reject(ctx, ds[3], "silent server test") })
	}

	if h.Backend != nil {
		bk := h.Backend(t, proxy.Addr())
		task, group := name(t, "task"), name(t, "group")
		if err := setOne(ctx, bk, &driver.TaskState{TaskUUID: task, TaskName: "silent", State: driver.StatePending, CreatedAt: time.Now()}); err != nil {
			t.Fatalf("SetStates before the server went silent: %v", err)
		}
		if err := bk.InitGroup(ctx, group, []string{task, task + "-2"}); err != nil {
			t.Fatalf("InitGroup before the server went silent: %v", err)
		}
		both("Backend.SetStates", func(ctx context.Context) error {
			return setOne(ctx, bk, &driver.TaskState{TaskUUID: task, TaskName: "silent", State: driver.StateStarted, CreatedAt: time.Now()})
		})
		both("Backend.GetState", func(ctx context.Context) error { _, err := bk.GetState(ctx, task); return err })
		both("Backend.InitGroup", func(ctx context.Context) error { return bk.InitGroup(ctx, group+"-b", []string{task}) })
		both("Backend.CompleteGroupMember", func(ctx context.Context) error {
			_, _, err := bk.CompleteGroupMember(ctx, group, task)
			return err
		})
		both("Backend.ClaimChord", func(ctx context.Context) error { _, err := bk.ClaimChord(ctx, group, "claimer"); return err })
		both("Backend.GroupStates", func(ctx context.Context) error { _, err := bk.GroupStates(ctx, group); return err })
	}

	if h.BrokerURL != nil {
		u := h.BrokerURL(proxy.Addr())
		both("OpenBroker", func(ctx context.Context) error {
			b, err := errand.OpenBroker(ctx, u)
			if err == nil {
				b.Close()
			}
			return err
		})
	}
	if h.BackendURL != nil {
		u := h.BackendURL(proxy.Addr())
		both("OpenBackend", func(ctx context.Context) error {
			b, err := errand.OpenBackend(ctx, u)
			if err == nil {
				b.Close()
			}
			return err
		})
	}
	if len(calls) == 0 {
		t.Fatalf("SilentHarness sets none of Broker, Backend, BrokerURL, BackendURL: nothing to check")
	}

	proxy.Stall()
	stalled := time.Now()
	defer proxy.Resume() // teardown talks to the server again
	type outcome struct {
		took time.Duration
		err  error
	}
	done := make([]chan outcome, len(calls))
	for i, c := range calls {
		done[i] = make(chan outcome, 1)
		go func() {
			cctx, cancel := context.Background(), context.CancelFunc(func() {})
			if c.deadline {
				cctx, cancel = context.WithTimeout(cctx, h.Deadline)
			}
			defer cancel()
			begun := time.Now()
			err := c.call(cctx)
			done[i] <- outcome{time.Since(begun), err}
		}()
	}
	// Wait for every call, but no longer than the longest bound allows
	// twice over: a call still blocked then is reported, not waited for.
	giveUp := time.After(2 * (max(h.Deadline, h.CallTimeout) + h.Slack))
	var report []string
	for i, c := range calls {
		bound, how := h.Deadline+h.Slack, fmt.Sprintf("a ctx deadline of %v", h.Deadline)
		if !c.deadline {
			bound, how = h.CallTimeout+h.Slack, fmt.Sprintf("no ctx deadline and a per-call timeout of %v", h.CallTimeout)
		}
		var o outcome
		select {
		case o = <-done[i]:
		case <-giveUp:
			giveUp = closedTime
			select {
			case o = <-done[i]:
			default:
				t.Errorf("bounded-call promise broken: %s with %s had not returned after %v while the server was silent; want an error within %v", c.name, how, time.Since(stalled).Round(time.Millisecond), bound)
				report = append(report, fmt.Sprintf("%s (%s): still blocked", c.name, mode(c.deadline)))
				continue
			}
		}
		report = append(report, fmt.Sprintf("%s (%s): %v, %v", c.name, mode(c.deadline), o.took.Round(10*time.Millisecond), o.err))
		if o.took > bound {
			t.Errorf("bounded-call promise broken: %s with %s took %v while the server was silent; want an error within %v", c.name, how, o.took.Round(time.Millisecond), bound)
		}
		if o.err == nil {
			t.Errorf("bounded-call promise broken: %s with %s returned no error although the server answered nothing; want a clear error", c.name, how)
		}
	}
	sort.Strings(report)
	for _, r := range report {
		t.Logf("silent server: %s", r)
	}
}

func mode(deadline bool) string {
	if deadline {
		return "deadline"
	}
	return "no deadline"
}

// closedTime is a channel that is always ready: once the kit has given up
// waiting, it gives up on every call still out.
var closedTime = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()
