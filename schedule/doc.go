// Package schedule runs periodic tasks: a cron spec, a time zone and a
// signature, sent once per tick however many scheduler replicas run.
//
// It is a module of its own (github.com/errand-go/errand/schedule) so that
// errand's core keeps no third-party dependency: it parses specs with
// github.com/robfig/cron/v3.
//
// # Specs
//
// Standard 5-field cron ("*/5 * * * *"), descriptors (@hourly, @daily, ...)
// and "@every D" with D whole seconds, its ticks aligned to the Unix epoch
// so every replica computes the same ones. A spec's zone is its
// "CRON_TZ=Zone " prefix, else [Entry.Location], else UTC.
//
// # Exactly once per tick
//
// The schedules live on the broker (driver.ScheduleStore), shared by every
// replica: a change made through one is seen by all within Config.Reload.
// Each replica computes the same ticks and, when one is due, claims it with
// an atomic compare-and-set on the broker (the tick is recorded as the
// schedule's latest if it is later than the one recorded); only the
// replica whose claim wins sends the task. There is no leader to elect and
// nothing to split: replicas that cannot reach each other still agree
// through the broker, and a replica that cannot reach the broker sends
// nothing. A task is sent at its tick, never before, with ETA the tick and
// the UUID [TickUUID](id, tick).
//
// A replica that dies between winning a claim and sending the task (one
// broker call) loses that tick: at most once per tick in that window. A
// failed send is retried by the replica that holds the claim while the
// tick is on time.
//
// # Missed ticks
//
// A tick more than Config.MissedAfter in the past when a scheduler gets to
// it (no scheduler ran) was missed: [Skip] drops it, [RunOnce] runs the
// task once for all the ticks of the gap.
//
// See docs/schedules.md for the whole story, with examples.
package schedule
