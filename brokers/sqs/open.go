package sqsbroker

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/logging"

	"github.com/errand-go/errand/driver"
)

func init() { driver.RegisterBroker("sqs", Open) }

// Open returns a broker for an sqs:// URL (see the package doc). Credentials
// come from the AWS default chain (environment, shared config, instance
// role); never from the URL.
func Open(ctx context.Context, u *url.URL) (driver.Broker, error) {
	q := u.Query()
	// LoadDefaultConfig's logger writes to stderr, and the SDK logs a few
	// warnings whatever ClientLogMode says (an unparsable Date header, a
	// response body it could not drain or close): errand stays quiet.
	loadOpts := []func(*config.LoadOptions) error{config.WithLogger(logging.Nop{})}
	if r := q.Get("region"); r != "" {
		loadOpts = append(loadOpts, config.WithRegion(r))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("sqs broker: load AWS config: %w", err)
	}
	var clientOpts []func(*sqs.Options)
	if u.Host != "" {
		scheme := "https"
		if q.Get("insecure") == "1" || q.Get("insecure") == "true" {
			scheme = "http"
		}
		clientOpts = append(clientOpts, func(o *sqs.Options) { o.BaseEndpoint = aws.String(scheme + "://" + u.Host) })
	}
	opts := &Options{QueuePrefix: q.Get("prefix"), NoCreate: q.Get("create") == "false"}
	switch q.Get("format") {
	case "":
	case "machinery":
		opts.Machinery = true
	default:
		return nil, fmt.Errorf("sqs broker: format %q is not known (only format=machinery)", q.Get("format"))
	}
	if err := driver.DurationParams(q, map[string]*time.Duration{"max_hop": &opts.MaxHop, "wait": &opts.WaitTime, "timeout": &opts.CallTimeout}); err != nil {
		return nil, fmt.Errorf("sqs broker: %w", err)
	}
	// Last, so it wraps whatever HTTPClient the config chose.
	clientOpts = append(clientOpts, RequestBodyWorkaround)
	b := New(sqs.NewFromConfig(cfg, clientOpts...), opts)
	if err := b.Ping(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// Ping checks the endpoint with one ListQueues call (at most one result),
// within ctx and Options.CallTimeout. Open pings before it returns, so a
// wrong, unreachable or silent endpoint, or refused credentials, are an
// error there, not at the first send. Credentials that may not list queues
// (AccessDenied) pass: the endpoint answered, and the broker does not need
// that permission.
func (b *Broker) Ping(ctx context.Context) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	_, err := b.client.ListQueues(ctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(1), QueueNamePrefix: aws.String(b.opts.QueuePrefix)})
	if err != nil && !hasCode(err, "AccessDenied", "AccessDeniedException") {
		return fmt.Errorf("sqs broker: endpoint check (ListQueues) failed: %w", err)
	}
	return nil
}
