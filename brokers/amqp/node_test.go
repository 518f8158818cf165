package amqpbroker_test

import (
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/errand-go/errand/conformance"
)

// node is a private RabbitMQ node a test starts for itself (as
// scripts/services does for the shared one): its own node name, ports,
// epmd, data directory and cookie, nothing system-wide.
type node struct {
	url  string
	proc *conformance.ServerProcess
	env  []string
	name string
}

const rabbitBin = "/usr/lib/rabbitmq/bin"

func startNode(t *testing.T) *node {
	t.Helper()
	amqpURL(t) // the shared node answers: RabbitMQ is installed
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		conformance.ServiceUnavailable(t, "rabbitmq-server not installed (scripts/services start installs it)")
	}
	dir := t.TempDir()
	port := func() string { _, p, _ := strings.Cut(conformance.FreeAddr(t), ":"); return p }
	addr := conformance.FreeAddr(t)
	_, amqpPort, _ := strings.Cut(addr, ":")
	n := &node{url: "amqp://guest:guest@" + addr + "/", name: "errand-t" + strings.ToLower(rand.Text()[:8]) + "@localhost"}
	epmd := port()
	for f, body := range map[string]string{
		"rabbitmq.conf":     "listeners.tcp.default = " + addr + "\nloopback_users = none\nlog.file.level = warning\n",
		"enabled_plugins":   "[].\n",
		"advanced.config":   "[].\n",
		"rabbitmq-env.conf": "",
		".erlang.cookie":    strings.ToUpper(rand.Text()),
	} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n.env = append(os.Environ(), "HOME="+dir, "ERL_EPMD_PORT="+epmd, "ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_NODENAME="+n.name, "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1", "RABBITMQ_NODE_PORT="+amqpPort,
		"RABBITMQ_DIST_PORT="+port(), "RABBITMQ_CONF_ENV_FILE="+dir+"/rabbitmq-env.conf",
		"RABBITMQ_CONFIG_FILE="+dir+"/rabbitmq", "RABBITMQ_ADVANCED_CONFIG_FILE="+dir+"/advanced.config",
		"RABBITMQ_ENABLED_PLUGINS_FILE="+dir+"/enabled_plugins", "RABBITMQ_MNESIA_BASE="+dir+"/mnesia",
		"RABBITMQ_LOG_BASE="+dir+"/log", "RABBITMQ_PLUGINS_EXPAND_DIR="+dir+"/plugins-expand",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		// The Erlang VM replaces the start script (no shell process in
		// between), so SIGTERM and SIGKILL reach the node itself; its
		// shell reads a pipe that stays open.
		"RABBITMQ_ALLOW_INPUT=1")
	stdin, keep, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		keep.Close()
		stdin.Close()
		kill := exec.Command("epmd", "-kill")
		kill.Env = n.env
		kill.Run()
	})
	n.proc = conformance.StartServerProcess(t, func() *exec.Cmd {
		c := exec.Command(filepath.Join(rabbitBin, "rabbitmq-server"))
		c.Env, c.Stdin = n.env, stdin
		return c
	}, func(ctx context.Context) error {
		c, err := amqp.DialConfig(n.url, amqp.Config{Dial: amqp.DefaultDial(time.Second)})
		if err != nil {
			return err
		}
		return c.Close()
	})
	return n
}

// ctl runs rabbitmqctl against the node.
func (n *node) ctl(t testing.TB, args ...string) {
	t.Helper()
	c := exec.Command(filepath.Join(rabbitBin, "rabbitmqctl"), append([]string{"-n", n.name}, args...)...)
	c.Env = n.env
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
}
