package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/redisconn"
)

func init() {
	driver.RegisterBroker("redis", Open)
	driver.RegisterBroker("rediss", Open)
	driver.RegisterBroker("redis-sentinel", Open)
	driver.RegisterBroker("rediss-sentinel", Open)
}

// Open returns a broker for a redis://, rediss://, redis-sentinel:// or
// rediss-sentinel:// URL (see the package doc). The broker owns the client it makes and closes it on Close.
// max_payload=BYTES sets Options.MaxPayload: 0 or absent is the default
// (DefaultMaxPayload), a negative count (max_payload=-1) no limit;
// timeout=DURATION sets Options.CallTimeout.
func Open(ctx context.Context, u *url.URL) (driver.Broker, error) {
	rdb, own, err := redisconn.Open(ctx, u, "prefix", "max_payload", "timeout", "format", "default_queue", "delayed_tasks_key", "max_block", "poll_interval")
	if err != nil {
		return nil, fmt.Errorf("redis broker: %w", err)
	}
	switch own.Get("format") {
	case "":
	case "machinery":
		return openMachinery(rdb, own)
	default:
		rdb.Close()
		return nil, fmt.Errorf("redis broker: format %q is not known (only format=machinery)", own.Get("format"))
	}
	opts := &Options{CloseClient: true, Prefix: own.Get("prefix")}
	if v := own.Get("max_payload"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			rdb.Close()
			return nil, fmt.Errorf("redis broker: max_payload %q is not a byte count (a negative count means no limit)", v)
		}
		opts.MaxPayload = n
	}
	if err := driver.DurationParams(own, map[string]*time.Duration{"timeout": &opts.CallTimeout}); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis broker: %w", err)
	}
	return New(rdb, opts), nil
}

// openMachinery returns a MachineryBroker for a URL with format=machinery.
func openMachinery(rdb goredis.UniversalClient, own url.Values) (driver.Broker, error) {
	if _, ok := rdb.(*goredis.ClusterClient); ok {
		rdb.Close()
		return nil, fmt.Errorf("redis broker: format=machinery: %w", errMachineryCluster)
	}
	opts := &MachineryOptions{
		Prefix:          own.Get("prefix"),
		DefaultQueue:    own.Get("default_queue"),
		DelayedTasksKey: own.Get("delayed_tasks_key"),
		CloseClient:     true,
	}
	if own.Has("poll_interval") {
		// An idle fetch no longer polls: it waits on machinery's list.
		rdb.Close()
		return nil, errors.New("redis broker: format=machinery: poll_interval is gone: an idle fetch waits on machinery's list and takes a task at once; max_block=DURATION bounds one wait (machinery's normal_tasks_poll_period)")
	}
	if err := driver.DurationParams(own, map[string]*time.Duration{"max_block": &opts.MaxBlock}); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis broker: %w", err)
	}
	return NewMachinery(rdb, opts), nil
}
