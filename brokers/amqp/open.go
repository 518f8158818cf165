package amqpbroker

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/errand-go/errand/driver"
)

func init() {
	driver.RegisterBroker("amqp", Open)
	driver.RegisterBroker("amqps", Open)
}

// Open returns a broker for an amqp:// or amqps:// URL (see the package
// doc), after checking within ctx that RabbitMQ accepts a connection.
// errand's own query parameters are taken off the URL before it is given
// to amqp091; its errors never carry the password (errand redacts them
// too).
func Open(ctx context.Context, u *url.URL) (driver.Broker, error) {
	q := u.Query()
	opts := &Options{QueuePrefix: q.Get("prefix")}
	if err := driver.DurationParams(q, map[string]*time.Duration{
		"max_delay": &opts.MaxDelay, "timeout": &opts.CallTimeout, "heartbeat": &opts.Heartbeat, "hold": &opts.HoldBuffered,
	}); err != nil {
		return nil, fmt.Errorf("amqp broker: %w", err)
	}
	switch t := q.Get("queue_type"); t {
	case "", "quorum":
	case "classic":
		opts.Classic = true
	default:
		return nil, fmt.Errorf("amqp broker: queue_type=%q: want quorum or classic", t)
	}
	for key, dst := range map[string]*int{"max_priority": nil, "prefetch": &opts.Prefetch, "prefetch_multiplier": &opts.PrefetchMultiplier, "max_payload": &opts.MaxPayload} {
		v := q.Get(key)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || (key == "max_priority" && n > 255) {
			return nil, fmt.Errorf("amqp broker: %s=%q: want a whole number (max_priority: 0 to 255)", key, v)
		}
		if dst == nil {
			opts.MaxPriority = uint8(n)
		} else {
			*dst = n
		}
	}
	switch f := q.Get("format"); f {
	case "":
	case "machinery":
		m, err := machineryParams(q)
		if err != nil {
			return nil, err
		}
		opts.Machinery = m
	default:
		return nil, fmt.Errorf("amqp broker: format %q is not known (only format=machinery)", f)
	}
	for _, k := range []string{"prefix", "max_delay", "timeout", "heartbeat", "hold", "queue_type", "max_priority", "prefetch", "prefetch_multiplier", "max_payload",
		"format", "exchange", "exchange_type", "binding_key", "default_queue", "queue_declare_args", "queue_binding_args"} {
		q.Del(k)
	}
	amqpURL := *u
	amqpURL.RawQuery = q.Encode()
	b := New(amqpURL.String(), opts)
	if err := b.Ping(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}
