package web

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The throughput chart. The broker keeps a running count of each queue's
// acks (QueueStats.Completed); the dashboard's sampler reads it every
// Options.SampleEvery and the chart draws its rate between samples.

// sample is the queues' running counts at one time.
type sample struct {
	at        time.Time
	completed map[string]int64
}

// sampler keeps the last max samples.
type sampler struct {
	mu   sync.Mutex
	max  int
	ring []sample // oldest first
}

func newSampler(max int) *sampler {
	return &sampler{max: max}
}

func (s *sampler) add(sm sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring = append(s.ring, sm)
	if n := len(s.ring) - s.max; n > 0 {
		s.ring = slices.Delete(s.ring, 0, n)
	}
}

func (s *sampler) snapshot() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ring)
}

// sample runs until ctx is done, taking a sample every SampleEvery.
func (d *Dashboard) sample(ctx context.Context) {
	defer close(d.done)
	t := time.NewTicker(d.opts.SampleEvery)
	defer t.Stop()
	var lastErr string
	for {
		cctx, cancel := context.WithTimeout(ctx, d.opts.CallTimeout)
		qs, err := d.srv.Queues(cctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if err.Error() != lastErr { // once per kind of failure, not every tick
				d.log.Warn("web: throughput sample failed", "err", err)
				lastErr = err.Error()
			}
		default:
			lastErr = ""
			sm := sample{at: time.Now(), completed: make(map[string]int64, len(qs))}
			for _, q := range qs {
				sm.completed[q.Name] = q.Stats.Completed
			}
			d.samples.add(sm)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rates returns each queue's throughput, in tasks per minute, at each
// sample: the rate since the latest earlier sample at least span before it
// (a moving average, so a short sampling interval does not draw every burst
// as a spike).
func rates(ss []sample, span time.Duration) map[string][]point {
	out := make(map[string][]point)
	j := 0
	for i := 1; i < len(ss); i++ {
		for j+1 < i && ss[i].at.Sub(ss[j+1].at) >= span {
			j++
		}
		dt := ss[i].at.Sub(ss[j].at).Minutes()
		if dt <= 0 {
			continue
		}
		for q, c := range ss[i].completed {
			prev, ok := ss[j].completed[q]
			if !ok {
				continue
			}
			r := float64(c-prev) / dt
			if r < 0 { // the broker's count was reset
				r = 0
			}
			out[q] = append(out[q], point{at: ss[i].at, rate: r})
		}
	}
	return out
}

type point struct {
	at   time.Time
	rate float64 // per minute
}

// lastRate returns each queue's latest rate per minute, over span.
func lastRate(ss []sample, span time.Duration) map[string]float64 {
	out := make(map[string]float64)
	for q, ps := range rates(ss, span) {
		out[q] = ps[len(ps)-1].rate
	}
	return out
}

// chart is an SVG line chart, laid out for the template.
type chart struct {
	W, H         int
	Left, Bottom float64 // the plot area's left and bottom edges
	Right, Top   float64
	Lines        []chartLine
	YTicks       []tick
	XTicks       []tick
	Empty        bool
	Window       string
}

type chartLine struct {
	Queue  string
	Color  string
	Points string // SVG polyline points
	Last   string // latest rate, formatted
}

type tick struct {
	Pos   float64
	Label string
}

// palette colours the lines, in the order of the queues' names.
var palette = []string{"#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d"}

// newChart lays out the rates of ss over the window ending at now.
func newChart(ss []sample, now time.Time, window time.Duration) chart {
	c := chart{W: 760, H: 200, Left: 52, Right: 748, Top: 12, Bottom: 176, Window: shortDuration(window)}
	rs := rates(ss, window/30)
	start := now.Add(-window)
	max := 0.0
	for _, ps := range rs {
		for _, p := range ps {
			if !p.at.Before(start) {
				max = math.Max(max, p.rate)
			}
		}
	}
	top := niceCeil(max)
	x := func(t time.Time) float64 {
		f := float64(t.Sub(start)) / float64(window)
		return c.Left + math.Max(0, math.Min(1, f))*(c.Right-c.Left)
	}
	y := func(r float64) float64 { return c.Bottom - r/top*(c.Bottom-c.Top) }
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		c.YTicks = append(c.YTicks, tick{Pos: y(v), Label: formatRate(v)})
	}
	for i := 0; i <= 5; i++ {
		ago := window * time.Duration(5-i) / 5
		label := "now"
		if ago > 0 {
			label = "-" + shortDuration(ago)
		}
		c.XTicks = append(c.XTicks, tick{Pos: x(now.Add(-ago)), Label: label})
	}
	names := make([]string, 0, len(rs))
	for q := range rs {
		names = append(names, q)
	}
	slices.Sort(names)
	for i, q := range names {
		var b strings.Builder
		for _, p := range rs[q] {
			if p.at.Before(start) {
				continue
			}
			fmt.Fprintf(&b, "%.1f,%.1f ", x(p.at), y(p.rate))
		}
		if b.Len() == 0 {
			continue
		}
		ps := rs[q]
		c.Lines = append(c.Lines, chartLine{
			Queue:  q,
			Color:  palette[i%len(palette)],
			Points: strings.TrimSpace(b.String()),
			Last:   formatRate(ps[len(ps)-1].rate),
		})
	}
	c.Empty = len(c.Lines) == 0
	return c
}

// niceCeil returns the smallest of 1, 2, 2.5, 5 times a power of ten that
// is at least v (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func formatRate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	case v >= 10:
		return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// shortDuration writes d as "10m", "90s", "1h30m".
func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d >= time.Minute:
		return strings.TrimSuffix(d.Round(time.Second).String(), "0s")
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
}

// latestRates returns each queue's latest throughput per minute, averaged
// as the chart averages it.
func (d *Dashboard) latestRates() map[string]float64 {
	return lastRate(d.samples.snapshot(), d.opts.History/30)
}
