package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/errand-go/errand"
)

// cli is one run of the command: where it writes, what it reads, and the
// server the operator commands use.
type cli struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	env    func(string) string
	cmd    *command

	// broker and backend, when set before the command runs (tests), are
	// what the operator commands use instead of opening them by URL; the
	// command does not close them.
	broker      errand.Broker
	backend     errand.Backend
	closeServer func()

	// The flags every operator command takes.
	brokerURL  string
	backendURL string
	output     string
	keysFile   string
	signWith   string

	// keys reports whether the server has signing keys (see signing.go).
	keys bool
}

// errHelp is returned after a command printed its usage for -h.
var errHelp = errors.New("help requested")

// usageError is a mistake on the command line (exit 2).
type usageError struct{ error }

func usageErrorf(format string, a ...any) error {
	return usageError{fmt.Errorf(format, a...)}
}

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

// newFlags returns the flag set of the command being run, with the flags
// every operator command takes.
func (c *cli) newFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("errand "+c.cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if c.cmd.operator {
		c.urlFlags(fs)
		fs.StringVar(&c.output, "o", "table", "output `format`: table or json")
		fs.StringVar(&c.keysFile, "signing-keys-file", "", "read signing keys from `FILE` (ID=SECRET entries, SECRET base64 or hex:HEX; default $"+envSigningKeys+"): verify signed messages, sign what enqueue and requeue send")
		fs.StringVar(&c.signWith, "sign-with", "", "the `ID` of the signing key enqueue and requeue sign with (default: the first key given)")
	}
	fs.Usage = func() {} // the flag package calls it on every error: printed for -h only
	return fs
}

// urlFlags adds --broker and --backend to fs (see urls).
func (c *cli) urlFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.brokerURL, "broker", "", "the broker's `URL` (default $ERRAND_BROKER_URL)")
	fs.StringVar(&c.backendURL, "backend", "", "the result backend's `URL` (default $ERRAND_BACKEND_URL, else the broker's URL when its scheme is also a backend's)")
}

// urls returns the broker's and the backend's URLs: the flag's, else the
// environment's, and for the backend else the broker's URL where its
// scheme is a backend's too (backendOf); "" where none is given.
func (c *cli) urls() (brokerURL, backendURL string) {
	brokerURL = firstOf(c.brokerURL, c.env("ERRAND_BROKER_URL"))
	return brokerURL, firstOf(c.backendURL, c.env("ERRAND_BACKEND_URL"), backendOf(brokerURL))
}

// firstOf returns the first non-empty string of ss.
func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// printUsage prints the usage of the command being run, with the flags of
// fs.
func (c *cli) printUsage(fs *flag.FlagSet) {
	fmt.Fprintf(c.stdout, "usage: errand %s %s\n\n%s\n", c.cmd.name, c.cmd.args, c.cmd.summary)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(c.stdout, "\nflags:\n")
		fs.SetOutput(c.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// queueFlag adds -q and --queue to fs.
func queueFlag(fs *flag.FlagSet) *string {
	q := new(string)
	fs.StringVar(q, "q", errand.DefaultQueue, "the `queue`")
	fs.StringVar(q, "queue", errand.DefaultQueue, "the `queue` (same as -q)")
	return q
}

// parse parses args with the command's common flags only.
func (c *cli) parse(args []string) ([]string, error) {
	return c.parseFlags(c.newFlags(), args)
}

// parseFlags parses args with fs, flags and positional arguments in any
// order (everything after "--" is positional), and returns the positional
// arguments.
func (c *cli) parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.printUsage(fs)
			return nil, errHelp
		}
		if err != nil {
			return nil, usageErrorf("%v (see errand help %s)", err, c.cmd.name)
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if c.cmd.operator && c.output != "table" && c.output != "json" {
		return nil, usageErrorf("-o %q: want table or json", c.output)
	}
	return pos, nil
}

// json reports whether the output is JSON.
func (c *cli) json() bool { return c.output == "json" }

// server returns the server the operator commands use: one over the
// broker and backend the flags or the environment name (or c.broker and
// c.backend), with the signing keys they give.
func (c *cli) server() (*errand.Server, error) {
	sg, err := c.signing()
	if err != nil {
		return nil, err
	}
	c.keys = sg != nil
	if c.broker != nil {
		srv, err := errand.NewServer(errand.Config{Broker: c.broker, Backend: c.backend, Signing: sg})
		if err != nil {
			return nil, usageError{err} // only the signing keys can be wrong
		}
		return srv, nil
	}
	brokerURL, backendURL := c.urls()
	if brokerURL == "" {
		return nil, usageErrorf("no broker: give --broker URL or set ERRAND_BROKER_URL")
	}
	noBackend := usageErrorf("no result backend: give --backend URL or set ERRAND_BACKEND_URL (the broker %s is not a backend too)", errand.RedactURL(brokerURL))
	if u, err := url.Parse(brokerURL); backendURL == "" && err == nil && strings.EqualFold(u.Scheme, "sqs") {
		return nil, noBackend // said before SQS is asked anything
	}
	broker, err := errand.OpenBroker(c.ctx, brokerURL)
	if err != nil {
		return nil, openFailure(err)
	}
	if backendURL == "" {
		broker.Close()
		return nil, noBackend
	}
	backend, err := errand.OpenBackend(c.ctx, backendURL)
	if err != nil {
		broker.Close()
		return nil, openFailure(err)
	}
	srv, err := errand.NewServer(errand.Config{Broker: broker, Backend: backend, Signing: sg})
	if err != nil {
		broker.Close()
		backend.Close()
		return nil, usageError{err} // only the signing keys can be wrong
	}
	c.closeServer = func() { srv.Close() }
	return srv, nil
}

// openFailure classes an OpenBroker or OpenBackend error: the driver
// failing (*errand.OpenError: unreachable server, refused credentials) is
// an operation that failed; a URL that does not parse, or whose scheme no
// driver registered, is a usage error. Neither error text holds a secret.
func openFailure(err error) error {
	var oe *errand.OpenError
	if errors.As(err, &oe) {
		return err
	}
	return usageError{err}
}

// backendOf returns the backend URL a broker URL implies, for the schemes
// that name both (redis, rediss, memory, postgres), without the
// broker-only parameters (max_payload); "" for the others.
func backendOf(brokerURL string) string {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return ""
	}
	switch strings.ToLower(u.Scheme) {
	case "redis", "rediss", "redis-sentinel", "rediss-sentinel", "memory", "postgres", "postgresql":
	default:
		return ""
	}
	q := u.Query()
	if !q.Has("max_payload") {
		return brokerURL
	}
	q.Del("max_payload")
	u.RawQuery = q.Encode()
	return u.String()
}
