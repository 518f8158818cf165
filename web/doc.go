// Package web is errand's dashboard: an http.Handler that shows a server's
// queues, their tasks by state, one task's detail and the live workers, and
// lets an operator requeue archived tasks, delete them, cancel tasks, and
// pause and resume queues. It uses the standard library only; its pages are rendered on the
// server (html/template, charts as inline SVG) and work without JavaScript.
//
//	srv, _ := errand.NewServer(errand.Config{Broker: b, Backend: be})
//	d := web.New(srv, web.Options{Username: "ops", Password: pw})
//	defer d.Close()
//	http.ListenAndServe(":8080", d)
//
// # Mounting under a prefix
//
// Every link and form the dashboard writes is relative to its root, so it
// can be mounted anywhere in a server of your own:
//
//	mux.Handle("/errand/", http.StripPrefix("/errand", d))
//
// # Pages
//
//   - / — every queue with its counts (pending, scheduled, retrying, in
//     flight, archived, completed), whether it is paused, and a chart of
//     its throughput over the last minutes (the broker's running count of
//     acks, sampled every Options.SampleEvery by the dashboard's own
//     goroutine; Close stops it).
//   - /queues/{queue} and /queues/{queue}/{list} — the queue's tasks in one
//     list (pending, scheduled, retrying, inflight, archived, completed), a
//     page at a time (?page=N).
//   - /queues/{queue}/tasks/{id} — one task: arguments, results, error,
//     attempts, the progress it last reported and a timeline of its states.
//   - /workers — the live workers, from their heartbeats, with the tasks
//     they run.
//   - /api/queues and /api/workers — the same as JSON.
//
// What the dashboard shows needs the broker's optional capabilities
// (driver.QueueLister, driver.Lister, driver.Archiver, driver.Pauser,
// driver.Heartbeater); a page whose capability the broker lacks says so.
//
// # Actions and their protection
//
// Requeue (one archived task, or all of a queue's), delete archived tasks,
// cancel a task not finished (errand.AsyncResult.Cancel: from its page, a
// list's row or the workers page), pause and resume are POST forms. Every POST must pass
// [net/http.CrossOriginProtection] (the browser's Sec-Fetch-Site header, or
// Origin against Host) and a same-origin check of Origin and Referer when
// the browser sends them, so another site cannot make an operator's browser
// act. Options.TrustedOrigins names origins allowed besides the dashboard's
// own (a proxy that rewrites Host, say). With Options.ReadOnly the forms are
// not shown and every POST is refused with 403 Forbidden.
//
// # Authentication
//
// Options.Token requires "Authorization: Bearer <token>";
// Options.Username and Options.Password require HTTP basic authentication
// (browsers prompt for it). When both are set either is accepted. Anything
// else gets 401 Unauthorized. Credentials are compared in constant time.
// Without them the dashboard is open to whoever reaches it: put it behind
// your own authentication, or bind it to a private address.
//
// # DNS rebinding
//
// A private address is not enough by itself: a page on evil.example whose
// name is then pointed at 127.0.0.1 is, to the browser, the same origin as
// a dashboard listening there. So without Options.Token and
// Options.Username the dashboard answers only requests whose Host is an IP
// literal, localhost (any port) or one of Options.AllowedHosts, and any
// other with 421 Misdirected Request. With credentials set the Host is not
// checked. [Dashboard.Guard] applies the same rules to a handler served
// beside the dashboard (errand web's /metrics).
package web
