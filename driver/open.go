package driver

import (
	"context"
	"net/url"

	"github.com/errand-go/errand/internal/registry"
)

// BrokerOpener opens a broker from a parsed URL. It checks the server
// answers within ctx. Its errors may carry the URL's secrets: errand redacts
// them before anyone sees them, keeping errors.Is and errors.As working.
type BrokerOpener func(ctx context.Context, u *url.URL) (Broker, error)

// BackendOpener opens a backend from a parsed URL (see BrokerOpener).
type BackendOpener func(ctx context.Context, u *url.URL) (Backend, error)

// RegisterBroker makes a broker available to errand.OpenBroker by URL
// scheme, database/sql style: a driver calls it from its init function, so
// importing the driver is enough. It panics if the scheme is registered
// twice.
func RegisterBroker(scheme string, open BrokerOpener) {
	registry.Brokers.Register(scheme, (func(context.Context, *url.URL) (Broker, error))(open))
}

// RegisterBackend makes a backend available to errand.OpenBackend by URL
// scheme (see RegisterBroker).
func RegisterBackend(scheme string, open BackendOpener) {
	registry.Backends.Register(scheme, (func(context.Context, *url.URL) (Backend, error))(open))
}
