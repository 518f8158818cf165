package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	errandotel "github.com/errand-go/errand/otel"
	"github.com/errand-go/errand/web"
)

// The environment variables errand web reads its credentials from (never
// flags: a command line shows in ps).
const (
	envWebToken    = "ERRAND_WEB_TOKEN"
	envWebUser     = "ERRAND_WEB_USER"
	envWebPassword = "ERRAND_WEB_PASSWORD"
)

// webShutdownTimeout bounds the graceful shutdown of errand web's HTTP
// server once its context is done: requests still running after it are cut.
const webShutdownTimeout = 10 * time.Second

// runWeb serves the dashboard (package web) and, unless --metrics=false,
// the Prometheus metrics of every queue on /metrics, until c.ctx is done.
func runWeb(c *cli, args []string) error {
	fs := c.newFlags()
	addr := fs.String("addr", "127.0.0.1:8080", "the `address` to listen on (host:port; port 0 picks a free one)")
	var allowedHosts []string
	fs.Func("allowed-host", "without credentials, also answer requests addressed to `HOST` (a name, or name:port; repeatable or comma-separated), besides IP addresses and localhost", func(v string) error {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				allowedHosts = append(allowedHosts, h)
			}
		}
		return nil
	})
	readOnly := fs.Bool("read-only", false, "hide the actions and refuse every POST with 403")
	metrics := fs.Bool("metrics", true, "serve the queues' depth in the Prometheus format on /metrics (--metrics=false: not served)")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("unexpected argument %q (see errand help web)", pos[0])
	}
	opts := web.Options{
		ReadOnly:     *readOnly,
		Token:        c.env(envWebToken),
		Username:     c.env(envWebUser),
		Password:     c.env(envWebPassword),
		AllowedHosts: allowedHosts,
		Logger:       slog.New(slog.NewTextHandler(c.stderr, nil)),
	}
	if opts.Username == "" && opts.Password != "" {
		return usageErrorf("%s is set without %s", envWebPassword, envWebUser)
	}
	if opts.Username != "" && opts.Password == "" {
		return usageErrorf("%s is set without %s", envWebUser, envWebPassword)
	}
	srv, err := c.server()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	dash := web.New(srv, opts)
	defer dash.Close()

	mux := http.NewServeMux()
	mux.Handle("/", dash)
	if *metrics {
		h, mp, err := errandotel.PrometheusHandler(errandotel.PrometheusConfig{Server: srv, Logger: opts.Logger})
		if err != nil {
			ln.Close()
			return err
		}
		defer mp.Shutdown(context.Background())
		// The dashboard's own rules: its credentials, or without them its
		// Host check (a rebound page must not read the metrics either).
		mux.Handle("GET /metrics", dash.Guard(h))
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	auth := "no authentication"
	switch {
	case opts.Token != "" && opts.Username != "":
		auth = "bearer token or basic authentication"
	case opts.Token != "":
		auth = "bearer token"
	case opts.Username != "":
		auth = "basic authentication"
	}
	mode := "actions enabled"
	if opts.ReadOnly {
		mode = "read-only"
	}
	served := "dashboard"
	if *metrics {
		served = "dashboard and /metrics"
	}
	tcp, _ := ln.Addr().(*net.TCPAddr)
	if opts.Token == "" && opts.Username == "" && (tcp == nil || !tcp.IP.IsLoopback()) {
		can := "sees every task's arguments and can requeue, delete and pause"
		if opts.ReadOnly {
			can = "sees every task's arguments"
		}
		fmt.Fprintf(c.stderr, "errand web: warning: listening on %s without authentication: whoever reaches it %s; set %s, or %s and %s, or listen on 127.0.0.1\n",
			ln.Addr(), can, envWebToken, envWebUser, envWebPassword)
	}

	fmt.Fprintf(c.stdout, "errand web: serving the %s on %s (listening on %s; %s; %s)\n", served, browseURL(tcp), ln.Addr(), mode, auth)

	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	select {
	case err := <-serveErr:
		return err // Serve failed before anyone asked it to stop
	case <-c.ctx.Done():
	}
	ctx, cancel := context.WithTimeout(context.Background(), webShutdownTimeout)
	defer cancel()
	err = hs.Shutdown(ctx)
	if serr := <-serveErr; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		hs.Close()
		return fmt.Errorf("shutting the HTTP server down: %w", err)
	}
	return nil
}

// browseURL is the URL to open in a browser for the listening address a:
// its own host, or localhost when it listens on every interface.
func browseURL(a *net.TCPAddr) string {
	if a == nil {
		return "http://localhost/"
	}
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(a.Port)) + "/"
}
