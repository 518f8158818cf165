package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand"
	redisbackend "github.com/errand-go/errand/backends/redis"
	amqpbroker "github.com/errand-go/errand/brokers/amqp"
)

// The AMQP rows: errand's AMQP broker (quorum queues) with the Redis
// backend against raw amqp091 floors on the same RabbitMQ (ERRAND_AMQP_URL)
// in the same run: publish with a confirm per message; delayed tasks; a
// chord. The drains, beside machinery's AMQP broker, are in amqppeers.go.

// amqpServer is errand on the AMQP broker with the Redis backend.
func amqpServer(r *report) *errand.Server {
	p := "bench-" + rand.Text()[:8]
	srv, _ := errand.NewServer(errand.Config{
		Broker:       amqpbroker.New(os.Getenv("ERRAND_AMQP_URL"), &amqpbroker.Options{QueuePrefix: p + "."}),
		Backend:      redisbackend.New(r.rdb, &redisbackend.Options{Prefix: p, ResultExpiry: 10 * time.Minute}),
		DefaultQueue: "q",
	})
	return srv
}

// rawAMQP opens a connection and a quorum queue of its own for a floor.
func rawAMQP() (*amqp.Connection, *amqp.Channel, string, error) {
	conn, err := amqp.Dial(os.Getenv("ERRAND_AMQP_URL"))
	if err != nil {
		return nil, nil, "", err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, "", err
	}
	q := "bench-raw-" + rand.Text()[:8]
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		conn.Close()
		return nil, nil, "", err
	}
	return conn, ch, q, nil
}

// rawPublish publishes total messages to q on ch, one confirm awaited per
// message.
func rawPublish(ctx context.Context, ch *amqp.Channel, q string, total int) error {
	if err := ch.Confirm(false); err != nil {
		return err
	}
	for i := range total {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(i))})
		if err != nil {
			return err
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("raw publish %d not confirmed: %v", i, err)
		}
	}
	return nil
}

func amqpScenarios(r *report) error {
	if os.Getenv("ERRAND_AMQP_URL") == "" {
		return nil
	}
	ctx, cancel := ctxTimeout()
	defer cancel()
	total := *n / 4

	// Enqueue, single producer.
	sc := fmt.Sprintf("AMQP enqueue %d, single producer", total)
	conn, ch, q, err := rawAMQP()
	if err != nil {
		return err
	}
	t0 := time.Now()
	err = rawPublish(ctx, ch, q, total)
	d := time.Since(t0)
	ch.QueueDelete(q, false, false, false)
	conn.Close()
	if err != nil {
		return err
	}
	const floorOne = "raw amqp091 publish + confirm"
	r.add(sc, floorOne, rate(total, d), "msgs/s")
	srv := amqpServer(r)
	t0 = time.Now()
	for i := range total {
		if _, err := srv.SendTask(ctx, errand.NewSignature("noop", i)); err != nil {
			return err
		}
	}
	r.compare(sc, "errand SendTask (AMQP broker, Redis backend)", rate(total, time.Since(t0)), "tasks/s", floorOne, "")
	srv.Close()

	if err := amqpDelayed(ctx, r); err != nil {
		return err
	}
	return amqpChord(ctx, r, 1000)
}

// amqpDelayed: 200 tasks due over 5 s through the TTL delay levels.
func amqpDelayed(ctx context.Context, r *report) error {
	const total = 200
	srv := amqpServer(r)
	defer srv.Close()
	var mu sync.Mutex
	var late []time.Duration
	early := 0
	o := newOnce(total)
	srv.Register("due", func(id int, eta int64) error {
		d := time.Since(time.Unix(0, eta))
		mu.Lock()
		if d < 0 {
			early++
		}
		late = append(late, d)
		mu.Unlock()
		o.mark(id)
		return nil
	})
	wk := srv.NewWorker(errand.WorkerConfig{Concurrency: 10})
	wk.Start()
	defer wk.Shutdown(context.Background())
	start := time.Now().Add(500 * time.Millisecond)
	for i := range total {
		eta := start.Add(time.Duration(i) * 5 * time.Second / total)
		sig := errand.NewSignature("due", i, eta.UnixNano())
		sig.ETA = &eta
		if _, err := srv.SendTask(ctx, sig); err != nil {
			return err
		}
	}
	if err := o.wait(ctx); err != nil {
		return err
	}
	p50, p99, mx := percentiles(late)
	const sc = "AMQP 200 delayed tasks over 5 s (lateness after ETA, TTL delay levels)"
	r.add(sc, "errand AMQP p50", ms(p50), "ms")
	r.add(sc, "errand AMQP p99", ms(p99), "ms")
	r.add(sc, "errand AMQP max", ms(mx), "ms")
	r.rows[len(r.rows)-1].target = "≤ 64 ms + one trip"
	r.add(sc, "started early", float64(early), "tasks")
	r.rows[len(r.rows)-1].target = "0"
	return nil
}

// amqpChord: send → callback start of a chord, 10 workers.
func amqpChord(ctx context.Context, r *report, size int) error {
	if *quick {
		size /= 10
	}
	sc := fmt.Sprintf("AMQP chord of %d (send → callback start), 10 workers", size)
	srv := amqpServer(r)
	defer srv.Close()
	o := newOnce(size)
	fired := make(chan time.Time, 2)
	srv.Register("member", func(i int) (int, error) { o.mark(i); return i, nil })
	srv.Register("callback", func(xs ...int) error {
		fired <- time.Now()
		if len(xs) != size {
			return fmt.Errorf("callback got %d results", len(xs))
		}
		return nil
	})
	wk := srv.NewWorker(errand.WorkerConfig{Concurrency: 10})
	wk.Start()
	defer wk.Shutdown(context.Background())
	sigs := make([]*errand.Signature, size)
	for i := range sigs {
		sigs[i] = errand.NewSignature("member", i)
	}
	g, _ := errand.NewGroup(sigs...)
	c, _ := errand.NewChord(g, errand.NewSignature("callback"))
	t0 := time.Now()
	res, err := srv.SendChord(ctx, c, errand.SendConcurrency(4))
	if err != nil {
		return err
	}
	var at time.Time
	select {
	case at = <-fired:
	case <-ctx.Done():
		return fmt.Errorf("AMQP chord callback never ran")
	}
	if _, err := res.Get(ctx); err != nil {
		return err
	}
	if err := o.wait(ctx); err != nil {
		return err
	}
	if len(fired) != 0 {
		return fmt.Errorf("AMQP chord callback ran twice")
	}
	r.add(sc, "errand AMQP broker + Redis backend", ms(at.Sub(t0)), "ms")
	return nil
}
