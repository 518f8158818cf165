package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/RichardKnop/machinery/v2"
	mamqpbroker "github.com/RichardKnop/machinery/v2/brokers/amqp"
	mconfig "github.com/RichardKnop/machinery/v2/config"
	eagerlock "github.com/RichardKnop/machinery/v2/locks/eager"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
)

// The AMQP drain rows (issue 31, item 8): errand's AMQP broker, machinery
// v2's AMQP broker and a raw amqp091 consumer drain the same number of
// preloaded no-op tasks from the same RabbitMQ, at 10 and 50 workers, in
// interleaved rounds (the subjects' order reversed every other round).
// errand and machinery record their states in Redis (errand's Redis
// backend, machinery's go-redis backend); the raw consumer records
// nothing and acks at once.

// amqpDrainTotal is how many tasks each AMQP drain preloads.
const amqpDrainTotal = 3000

func amqpDrainSubjects() []subject {
	return []subject{
		{"raw", func(r *report) (peer, error) { return newRawAMQPPeer() }},
		{"errand", func(r *report) (peer, error) { return newErrandAMQPPeer(r), nil }},
		{"machinery", func(r *report) (peer, error) { return newMachineryAMQPPeer(r), nil }},
	}
}

// amqpDrains runs the AMQP drains, *rounds rounds.
func amqpDrains(r *report) error {
	subjects := amqpDrainSubjects()
	if *subjectsFlag != "" {
		subjects = slices.DeleteFunc(subjects, func(s subject) bool { return !strings.Contains(*subjectsFlag, s.name) })
	}
	total := amqpDrainTotal
	if *quick {
		total /= 10
	}
	if r.amqp == nil {
		r.amqp = peerRuns{}
	}
	r.amqpTotal = total
	for round := range *rounds {
		for _, w := range []int{10, 50} {
			order := slices.Clone(subjects)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, s := range order {
				fmt.Fprintf(os.Stderr, "bench: AMQP drain round %d: %d workers: %s\n", round+1, w, s.name)
				ctx, cancel := ctxTimeout()
				p, err := s.open(r)
				if err != nil {
					cancel()
					return err
				}
				d, err := drainOn(ctx, p, total, w, nil)
				p.stop()
				cancel()
				if err != nil {
					return fmt.Errorf("AMQP drain round %d, %d workers, %s: %w", round+1, w, s.name, err)
				}
				r.amqp.add("drain"+strconv.Itoa(w), s.name, rate(total, d))
				if err := r.clean(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (r *report) amqpMarkdown() string {
	if len(r.amqp) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## errand beside machinery on RabbitMQ (issue 31)\n\n")
	fmt.Fprintf(&b, "errand's AMQP broker (quorum queue, its default) with errand's Redis backend, machinery v2.0.16's AMQP broker (its classic queue, exchange and binding; `PrefetchCount` = its concurrency) with its go-redis backend, and a raw amqp091 consumer (quorum queue, one consumer with prefetch = workers, w goroutines acking at once, nothing recorded), on the same RabbitMQ node and Redis in this run: %d interleaved rounds, the subjects' order reversed every other round; each cell is the median, with the range over the rounds in brackets. Each drain preloads %d tasks (five int64 arguments, a no-op handler; not timed) and times from the workers' start to the last handler start, every task checked to run exactly once. Ratios are errand ÷ the other subject from the medians, with the per-round range.\n\n", *rounds, r.amqpTotal)
	b.WriteString("| scenario | raw floor | machinery | errand | errand ÷ machinery | errand ÷ raw | target | met |\n|---|---|---|---|---|---|---|---|\n")
	for _, w := range []int{10, 50} {
		runs := r.amqp["drain"+strconv.Itoa(w)]
		if runs == nil {
			continue
		}
		e, m, raw := median(runs["errand"]), median(runs["machinery"]), median(runs["raw"])
		target, met := "errand ≥ 0.7× raw", raw > 0 && e/raw >= 0.7
		if w == 10 {
			target = "errand ≥ 1.0× machinery and ≥ 0.7× raw"
			met = met && m > 0 && e/m >= 1.0
		}
		verdict := "not met"
		if met {
			verdict = "met"
		}
		fmt.Fprintf(&b, "| AMQP drain %s, %d workers | %s | %s | %s | %s | %s | %s | %s |\n", kn(r.amqpTotal), w,
			cell(runs["raw"], "tasks/s"), cell(runs["machinery"], "tasks/s"), cell(runs["errand"], "tasks/s"),
			ratioCell(runs["errand"], runs["machinery"]), ratioCell(runs["errand"], runs["raw"]), target, verdict)
	}
	b.WriteString("\n")
	return b.String()
}

// amqpAdmin runs fn on a channel of a connection of its own (queue and
// exchange declarations and deletions of the bench's subjects).
func amqpAdmin(fn func(ch *amqp.Channel) error) error {
	conn, err := amqp.Dial(os.Getenv("ERRAND_AMQP_URL"))
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return fn(ch)
}

// raw: one quorum queue, preloaded with confirmed publishes; one consumer
// with prefetch = workers and w goroutines acking each delivery at once.

type rawAMQPPeer struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	q    string
	cch  *amqp.Channel
	wg   sync.WaitGroup
}

func newRawAMQPPeer() (*rawAMQPPeer, error) {
	conn, ch, q, err := rawAMQP()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, err
	}
	return &rawAMQPPeer{conn: conn, ch: ch, q: q}, nil
}

func (p *rawAMQPPeer) token() string { return p.q }

func (p *rawAMQPPeer) send(ctx context.Context, id, sent int64) error {
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", p.q, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(rawPayload(id, sent))})
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("raw publish %d not confirmed: %v", id, err)
	}
	return nil
}

// preload publishes count messages, waiting for their confirms in runs
// of 500.
func (p *rawAMQPPeer) preload(ctx context.Context, count int) error {
	var dcs []*amqp.DeferredConfirmation
	for i := range count {
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", p.q, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(rawPayload(int64(i), 0))})
		if err != nil {
			return err
		}
		if dcs = append(dcs, dc); len(dcs) == 500 || i == count-1 {
			for _, dc := range dcs {
				if ok, err := dc.WaitContext(ctx); err != nil || !ok {
					return fmt.Errorf("raw publish not confirmed: %v", err)
				}
			}
			dcs = dcs[:0]
		}
	}
	return nil
}

func (p *rawAMQPPeer) start(w int, run func(id, sent int64)) error {
	cch, err := p.conn.Channel()
	if err != nil {
		return err
	}
	if err := cch.Qos(w, 0, false); err != nil {
		return err
	}
	deliveries, err := cch.Consume(p.q, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	p.cch = cch
	for range w {
		p.wg.Go(func() {
			for d := range deliveries {
				var a [5]int64
				if json.Unmarshal(d.Body, &a) == nil {
					run(a[0], a[1])
				}
				d.Ack(false)
			}
		})
	}
	return nil
}

func (p *rawAMQPPeer) pending(ctx context.Context) (int, error) {
	q, err := p.ch.QueueDeclarePassive(p.q, true, false, false, false, nil)
	return q.Messages, err
}

func (p *rawAMQPPeer) stop() {
	if p.cch != nil {
		p.cch.Close()
		p.wg.Wait()
	}
	p.ch.QueueDelete(p.q, false, false, false)
	p.conn.Close()
}

// errand: the AMQP broker with default options (quorum queues) but its
// queue prefix, and the Redis backend.

type errandAMQPPeer struct {
	errandPeer
}

func newErrandAMQPPeer(r *report) *errandAMQPPeer {
	p := token("errand")
	srv, _ := errand.NewServer(errand.Config{
		Broker:  amqpbroker.New(os.Getenv("ERRAND_AMQP_URL"), &amqpbroker.Options{QueuePrefix: p + "."}),
		Backend: redisbackend.New(r.rdb, &redisbackend.Options{Prefix: p, ResultExpiry: 10 * time.Minute}),
	})
	return &errandAMQPPeer{errandPeer{srv: srv, prefix: p}}
}

func (p *errandAMQPPeer) stop() {
	p.errandPeer.stop()
	p.srv.Close()
	q := p.prefix + "." + errand.DefaultQueue
	amqpAdmin(func(ch *amqp.Channel) error {
		ch.QueueDelete(q, false, false, false)
		ch.QueueDelete(q+".dead", false, false, false)
		return nil
	})
}

// machinery: its AMQP broker on an exchange and queue of the run's own
// (direct exchange, the queue bound with its name, as machinery's
// examples set them up), PrefetchCount = the worker's concurrency, and
// the go-redis backend machinery's Redis peer uses. One producer Server
// per run preloads (machinery's Publish: a confirm per message).

type machineryAMQPPeer struct {
	q        string
	producer *machinery.Server
	worker   *machinery.Worker
	errs     chan error
}

func newMachineryAMQPPeer(r *report) *machineryAMQPPeer {
	machineryInit(r)
	q := token("machinery")
	p := &machineryAMQPPeer{q: q}
	p.producer = p.server(1)
	return p
}

func (p *machineryAMQPPeer) config(prefetch int) *mconfig.Config {
	return &mconfig.Config{
		Broker:          os.Getenv("ERRAND_AMQP_URL"),
		DefaultQueue:    p.q,
		ResultsExpireIn: 3600,
		NoUnixSignals:   true,
		AMQP: &mconfig.AMQPConfig{
			Exchange:      p.q + ".x",
			ExchangeType:  "direct",
			BindingKey:    p.q,
			PrefetchCount: prefetch,
		},
	}
}

func (p *machineryAMQPPeer) server(prefetch int) *machinery.Server {
	cnf := p.config(prefetch)
	return machinery.NewServer(cnf, mamqpbroker.New(cnf), machineryShared.backend, eagerlock.New())
}

func (p *machineryAMQPPeer) token() string { return p.q }

func (p *machineryAMQPPeer) send(ctx context.Context, id, sent int64) error {
	_, err := p.producer.SendTaskWithContext(ctx, (&machineryPeer{q: p.q}).sig(id, sent))
	return err
}

func (p *machineryAMQPPeer) preload(ctx context.Context, count int) error {
	return concurrentlyN(count, producers, func(i int) error { return p.send(ctx, int64(i), 0) })
}

func (p *machineryAMQPPeer) start(w int, run func(id, sent int64)) error {
	srv := p.server(w)
	if err := srv.RegisterTasks(map[string]any{"noop5": func(id, sent, _, _, _ int64) error { run(id, sent); return nil }}); err != nil {
		return err
	}
	p.worker = srv.NewWorker("bench", w)
	p.errs = make(chan error, 4)
	p.worker.LaunchAsync(p.errs)
	return nil
}

func (p *machineryAMQPPeer) pending(ctx context.Context) (int, error) {
	n := 0
	err := amqpAdmin(func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(p.q, true, false, false, false, nil)
		n = q.Messages
		return err
	})
	return n, err
}

func (p *machineryAMQPPeer) stop() {
	if p.worker != nil {
		p.worker.Quit()
		select {
		case <-p.errs:
		case <-time.After(30 * time.Second):
			fmt.Fprintln(os.Stderr, "bench: machinery AMQP worker did not stop within 30 s")
		}
	}
	if b, ok := p.producer.GetBroker().(*mamqpbroker.Broker); ok {
		b.CloseConnections()
	}
	amqpAdmin(func(ch *amqp.Channel) error {
		ch.QueueDelete(p.q, false, false, false)
		ch.ExchangeDelete(p.q+".x", false, false)
		return nil
	})
}
