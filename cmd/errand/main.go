// Command errand is errand's command-line tool: a tour on the embedded
// drivers (the same tour as go run ./cmd/demo from a clone), and the
// operator's commands over a deployment's broker and result backend (see
// docs/operations.md).
//
//	errand demo                       run the whole story on the embedded in-memory drivers
//	errand queues                     list the queues with their counts
//	errand stats [QUEUE]              one queue's counts (every queue's without QUEUE)
//	errand ls STATE [-q QUEUE]        list a queue's tasks in one state
//	errand show ID [-q QUEUE]         one task: its message, list and state
//	errand requeue ID...|--all|--name NAME [-q QUEUE]
//	errand delete ID...|--all|--name NAME [-q QUEUE]
//	errand cancel ID...               cancel tasks, or every task of a chord's or recorded group
//	errand purge [-q QUEUE] --yes     drop a queue's pending and scheduled tasks
//	errand pause QUEUE / resume QUEUE
//	errand workers                    the live workers
//	errand enqueue NAME [ARG...] [-q QUEUE]
//	errand web [--addr ADDR] [--allowed-host HOST] [--read-only] [--metrics=false]
//	                                  serve the dashboard and /metrics
//	errand migrate [--broker URL] [--backend URL]
//	                                  create or upgrade the drivers' schema (PostgreSQL)
//	errand version                    print the version
//
// The operator commands open the broker and the backend by URL: --broker
// and --backend, or ERRAND_BROKER_URL and ERRAND_BACKEND_URL. On queues
// whose messages are signed (errand.Signing), they take the signing keys
// from --signing-keys-file FILE or ERRAND_SIGNING_KEYS (ID=SECRET entries):
// show, ls and web then mark each signed message verified or not, and
// enqueue and requeue sign what they send. errand web
// reads its credentials from ERRAND_WEB_TOKEN (bearer) or ERRAND_WEB_USER
// and ERRAND_WEB_PASSWORD (basic authentication), never from flags. Exit codes:
// 0 done, 1 the operation failed, 2 a usage error.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"

	"github.com/errand-go/errand/internal/tour"

	// The drivers, for the URL schemes they register.
	_ "github.com/errand-go/errand/backends/memcache"
	_ "github.com/errand-go/errand/backends/memory"
	_ "github.com/errand-go/errand/backends/mongo"
	_ "github.com/errand-go/errand/backends/postgres"
	_ "github.com/errand-go/errand/backends/redis"
	_ "github.com/errand-go/errand/brokers/amqp"
	_ "github.com/errand-go/errand/brokers/memory"
	_ "github.com/errand-go/errand/brokers/postgres"
	_ "github.com/errand-go/errand/brokers/redis"
	_ "github.com/errand-go/errand/brokers/sqs"
)

// version is the module version the binary was built from (as `go install
// .../cmd/errand@vX` records it), or "devel" for a build from a checkout.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // the operation failed: a server error, an unknown queue or task
	exitUsage  = 2 // a usage error: unknown command, bad flag or argument, malformed URL
)

// command is one subcommand of the table.
type command struct {
	name     string
	args     string // the synopsis after the name
	summary  string // one line for the command list
	operator bool   // opens the broker and backend (takes --broker, --backend, -o)
	run      func(c *cli, args []string) error
}

// commands is the command table, in the order usage lists it.
var commands = []*command{
	{name: "demo", summary: "run a tour of errand on the embedded in-memory broker and backend", run: runDemo},
	{name: "queues", summary: "list the queues: paused or not, and their counts", operator: true, run: runQueues},
	{name: "stats", args: "[QUEUE]", summary: "one queue's counts (every queue's without QUEUE)", operator: true, run: runStats},
	{name: "ls", args: "STATE [-q QUEUE] [--page N] [--size N]", summary: "list a queue's tasks in STATE: pending, scheduled, retrying, inflight, archived, completed", operator: true, run: runList},
	{name: "show", args: "ID [-q QUEUE]", summary: "show one task: its message, the list holding it, its recorded state", operator: true, run: runShow},
	{name: "requeue", args: "(ID...|--all|--name NAME) [-q QUEUE]", summary: "send archived tasks again as fresh attempts", operator: true, run: runRequeue},
	{name: "delete", args: "(ID...|--all|--name NAME) [-q QUEUE]", summary: "delete archived tasks", operator: true, run: runDelete},

	{name: "cancel", args: "ID...", summary: "cancel tasks (by a task's ID, or a chord's or recorded group's): a queued one never starts, a running one has its ctx cancelled", operator: true, run: runCancel},
	{name: "purge", args: "[-q QUEUE] (--yes|-f)", summary: "drop a queue's pending and scheduled tasks (only with --yes)", operator: true, run: runPurge},
	{name: "pause", args: "QUEUE", summary: "stop every worker from fetching QUEUE's tasks", operator: true, run: runPause},
	{name: "resume", args: "QUEUE", summary: "let workers fetch QUEUE's tasks again", operator: true, run: runResume},
	{name: "workers", summary: "list the live workers and what they run", operator: true, run: runWorkers},
	{name: "enqueue", args: "NAME [ARG...] [-q QUEUE] [--delay D] [--retries N]", summary: "send task NAME with ARGs (JSON values or TYPE:VALUE); prints its ID", operator: true, run: runEnqueue},
	{name: "migrate", args: "[--broker URL] [--backend URL]", summary: "create the schema of drivers that keep one (PostgreSQL), or bring it to this build's version", run: runMigrate},
	{name: "web", args: "[--addr ADDR] [--allowed-host HOST] [--read-only] [--metrics=false]", summary: "serve the dashboard, and the queues' Prometheus metrics on /metrics", operator: true, run: runWeb},
	{name: "version", summary: "print the version", run: runVersion},
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run runs the command line args (without the program name) and returns
// the exit code. env reads the environment (os.Getenv in main).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) string) int {
	return (&cli{ctx: ctx, stdout: stdout, stderr: stderr, env: env}).main(args)
}

func (c *cli) main(args []string) int {
	if c.env == nil {
		c.env = func(string) string { return "" }
	}
	if len(args) == 0 {
		usage(c.stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if cmd := lookup(args[1]); cmd != nil {
				return c.main([]string{cmd.name, "-h"})
			}
		}
		usage(c.stdout)
		return exitOK
	}
	cmd := lookup(args[0])
	if cmd == nil {
		fmt.Fprintf(c.stderr, "errand: unknown command %q (see errand help)\n", args[0])
		return exitUsage
	}
	c.cmd = cmd
	err := cmd.run(c, args[1:])
	if c.closeServer != nil {
		c.closeServer()
	}
	if err == nil {
		return exitOK
	}
	if err == errHelp {
		return exitOK
	}
	fmt.Fprintf(c.stderr, "errand %s: %s\n", cmd.name, oneLine(err))
	if isUsage(err) {
		return exitUsage
	}
	return exitFailed
}

// oneLine is err's text on one line, without a leading "errand: " (the
// line already says errand).
func oneLine(err error) string {
	s := strings.TrimPrefix(err.Error(), "errand: ")
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

func usage(w io.Writer) {
	fmt.Fprint(w, "usage: errand <command> [arguments]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s  %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
The operator commands open the broker and the result backend by URL:
  --broker URL    or ERRAND_BROKER_URL   (redis://, rediss://, sqs://, amqp://, memory://)
  --backend URL   or ERRAND_BACKEND_URL  (redis://, mongodb://, memcache://, memory://);
                  default: the broker's URL when its scheme is also a backend's
  -o json         print JSON instead of a table
  --signing-keys-file FILE  or ERRAND_SIGNING_KEYS  (ID=SECRET,...; SECRET base64 or hex:HEX)
                  verify signed messages, and sign what enqueue and requeue send
                  (with the first key, or --sign-with ID)
Run "errand help COMMAND" for a command's flags. Exit codes: 0 done,
1 the operation failed, 2 a usage error.
`)
}

func runDemo(c *cli, args []string) error {
	if _, err := c.parse(args); err != nil {
		return err
	}
	// The same tour as go run ./cmd/demo, the README's first command.
	return tour.Run(c.ctx, c.stdout)
}

func runVersion(c *cli, args []string) error {
	if _, err := c.parse(args); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, "errand", version())
	return nil
}
