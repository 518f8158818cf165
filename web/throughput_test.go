package web

import (
	"strings"
	"testing"
	"time"
)

func TestRatesAverageOverSpan(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ss := []sample{
		{at: t0, completed: map[string]int64{"a": 0}},
		{at: t0.Add(10 * time.Second), completed: map[string]int64{"a": 10, "b": 5}},
		{at: t0.Add(20 * time.Second), completed: map[string]int64{"a": 30, "b": 5}},
		{at: t0.Add(30 * time.Second), completed: map[string]int64{"a": 0, "b": 10}}, // a's count reset
	}
	rs := rates(ss, 0)
	want := []float64{60, 120, 0} // per minute between consecutive samples; a reset is 0, not negative
	if len(rs["a"]) != 3 {
		t.Fatalf("rates of a: %v, want 3 points", rs["a"])
	}
	for i, p := range rs["a"] {
		if p.rate != want[i] {
			t.Errorf("rate of a at sample %d = %v/min, want %v", i+1, p.rate, want[i])
		}
	}
	if len(rs["b"]) != 2 || rs["b"][0].rate != 0 || rs["b"][1].rate != 30 {
		t.Errorf("rates of b (appears at the second sample) = %v, want 0 then 30/min", rs["b"])
	}
	// Averaged over 20s: the third sample's rate is (30-0)/20s = 90/min.
	if got := rates(ss, 20*time.Second)["a"][1].rate; got != 90 {
		t.Errorf("rate of a over 20s at the third sample = %v/min, want 90", got)
	}
}

func TestChartLayout(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	if c := newChart(nil, now, time.Minute); !c.Empty || len(c.Lines) != 0 {
		t.Errorf("a chart without samples is not empty: %+v", c)
	}
	ss := []sample{
		{at: now.Add(-40 * time.Second), completed: map[string]int64{"q": 0}},
		{at: now.Add(-20 * time.Second), completed: map[string]int64{"q": 100}},
		{at: now, completed: map[string]int64{"q": 150}},
	}
	c := newChart(ss, now, time.Minute)
	if c.Empty || len(c.Lines) != 1 || c.Lines[0].Queue != "q" || c.Lines[0].Last != "150" {
		t.Fatalf("chart lines = %+v, want one line for q ending at 150/min", c.Lines)
	}
	if n := len(strings.Fields(c.Lines[0].Points)); n != 2 {
		t.Errorf("q's line has %d points, want 2", n)
	}
	if top := c.YTicks[len(c.YTicks)-1].Label; top != "500" {
		t.Errorf("the y axis tops at %s, want 500 (the nice ceiling of 300/min)", top)
	}
	if c.XTicks[len(c.XTicks)-1].Label != "now" || c.XTicks[0].Label != "-1m" {
		t.Errorf("x ticks %v, want -1m … now", c.XTicks)
	}
	for v, want := range map[float64]float64{0: 1, 0.5: 1, 3: 5, 10: 10, 11: 20, 240: 250, 251: 500} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}
