package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybroker "github.com/errand-go/errand/brokers/memory"
	"github.com/errand-go/errand/driver"
)

// RunBackend runs every backend case against h, as subtests named
// Backend/<Case>/<Subcase>.
func RunBackend(t *testing.T, h BackendHarness) {
	h.Timing = h.Timing.withDefaults()
	if h.Caps.MinExpiry <= 0 {
		h.Caps.MinExpiry = 100 * time.Millisecond
	}
	t.Run("Backend", func(t *testing.T) { runCases(t, h, h.Timing, h.Serial, backendCases) })
}

var backendCases = []kase[BackendHarness]{
	{"Capabilities", backendCapabilities, parallel},
	{"State/RoundTrip", stateRoundTrip, parallel},
	{"State/Unknown", stateUnknown, parallel},
	{"State/Expiry", stateExpiry, alone},
	{"State/Wait", stateWait, alone},
	{"State/Batch", stateBatch, parallel},
	{"Group/CompleteIdempotent", groupIdempotent, parallel},
	{"Group/CountWithoutStates", groupCountWithoutStates, parallel},
	{"Group/StatesInOrder", groupStatesInOrder, parallel},
	{"Group/OutlivesResultExpiry", groupOutlivesExpiry, alone},
	{"Group/NonMemberNotCounted", groupNonMember, parallel},
	{"Chord/ClaimOnce", chordClaimOnce, parallel},
	{"Start/Table", startTable, parallel},
	{"Start/Batch", startBatch, parallel},
	{"Start/SameTask", startSameTask, parallel},
	{"Start/Concurrent", startConcurrent, parallel},
	{"Start/NeverBeforeCreated", startNeverBeforeCreated, parallel},
	{"State/PendingIfAbsent", pendingIfAbsent, parallel},
	{"Cancel/Table", cancelTable, parallel},
	{"Cancel/KeepsTask", cancelKeepsTask, parallel},
	{"Cancel/Sticky", cancelSticky, parallel},
	{"Cancel/Concurrent", cancelConcurrent, parallel},
	{"Cancel/Wait", cancelWait, alone},
	{"State/Progress", stateProgress, parallel},
}

type becase struct {
	t   testing.TB
	h   BackendHarness
	b   errand.Backend
	ctx context.Context
}

func newBeCase(t testing.TB, h BackendHarness, expiry time.Duration) *becase {
	return &becase{t: t, h: h, b: h.New(t, expiry), ctx: caseCtx(t, h.Timing)}
}

func (c *becase) set(st *errand.TaskState) {
	c.t.Helper()
	if err := setOne(c.ctx, c.b, st); err != nil {
		c.t.Fatalf("SetStates(%s %s): %v", st.TaskUUID, st.State, err)
	}
}

func backendCapabilities(t testing.TB, h BackendHarness) {
	b := h.New(t, 0)
	checkCapability(t, b, h.Caps.Waiter, reflect.TypeFor[driver.StateWaiter](), "Waiter")
	checkCapability(t, b, h.Caps.Expiry, reflect.TypeFor[driver.Expirer](), "Expiry")
	checkCapability(t, b, h.Caps.Start, reflect.TypeFor[driver.Starter](), "Start")
	checkCapability(t, b, h.Caps.PendingIfAbsent, reflect.TypeFor[driver.PendingWriter](), "PendingIfAbsent")
	checkCapability(t, b, h.Caps.Located, reflect.TypeFor[driver.Located](), "Located")
	checkCapability(t, b, h.Caps.Tx, reflect.TypeFor[driver.Transactor](), "Tx")
	checkCapability(t, b, h.Caps.Cancel, reflect.TypeFor[driver.Canceller](), "Cancel")
	if h.Caps.Durable && h.Caps.Lossy {
		t.Errorf("capabilities promise broken: harness declares both Durable and Lossy; a backend that may lose entries cannot promise to keep them across a restart")
	}
}

type payload struct {
	N    int               `json:"n"`
	Tags []string          `json:"tags"`
	M    map[string]uint64 `json:"m"`
	Nest *payload          `json:"nest,omitempty"`
}

func stateRoundTrip(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	id := name(t, "task")
	values := []any{42, -1.5, "héllo \"quoted\"", true, nil, []int{1, 2}, map[string]any{"a": []any{"x", 1.0}},
		payload{N: 7, Tags: []string{"a"}, M: map[string]uint64{"big": 1 << 60}, Nest: &payload{N: 8}}}
	var results []errand.Result
	for _, v := range values {
		b, _ := json.Marshal(v)
		results = append(results, errand.Result{Type: fmt.Sprintf("%T", v), Value: b})
	}
	created := time.Now().UTC().Truncate(time.Millisecond)
	want := &errand.TaskState{TaskUUID: id, TaskName: "conformance.roundtrip", State: errand.StateSuccess, Attempt: 3,
		Results: results, Error: "", CreatedAt: created, StartedAt: created.Add(time.Second), FinishedAt: created.Add(2 * time.Second)}
	c.set(&errand.TaskState{TaskUUID: id, TaskName: want.TaskName, State: errand.StatePending, CreatedAt: created})
	c.set(want)
	got, err := c.b.GetState(c.ctx, id)
	if err != nil {
		t.Fatalf("GetState: %v", err)
	}
	if got.TaskUUID != want.TaskUUID || got.TaskName != want.TaskName || got.State != want.State || got.Attempt != want.Attempt || got.Error != want.Error {
		t.Fatalf("state promise broken: stored %+v, read back %+v", want, got)
	}
	for _, ts := range [][2]time.Time{{got.CreatedAt, want.CreatedAt}, {got.StartedAt, want.StartedAt}, {got.FinishedAt, want.FinishedAt}} {
		if !ts[0].Equal(ts[1]) {
			t.Errorf("state promise broken: timestamp %v read back as %v", ts[1], ts[0])
		}
	}
	if len(got.Results) != len(results) {
		t.Fatalf("state promise broken: %d results stored, %d read back", len(results), len(got.Results))
	}
	for i, r := range got.Results {
		var a, b any
		json.Unmarshal(r.Value, &a)
		json.Unmarshal(results[i].Value, &b)
		if r.Type != results[i].Type || !reflect.DeepEqual(a, b) {
			t.Errorf("state promise broken: result %d stored as %s %s, read back as %s %s", i, results[i].Type, results[i].Value, r.Type, r.Value)
		}
	}
	// A failure's error text, kind and detail round-trip too.
	fail := &errand.TaskState{TaskUUID: id, TaskName: want.TaskName, State: errand.StateFailure, Error: "boom: \"quoted\"\nline 2",
		ErrorKind: "bad_arguments", ErrorDetail: `{"is":["bad_arguments"],"arg":{"task":"t","index":1,"got":"string","want":"int"}}`, CreatedAt: created}
	c.set(fail)
	if got, err := c.b.GetState(c.ctx, id); err != nil || got.State != errand.StateFailure || got.Error != fail.Error || len(got.Results) != 0 {
		t.Fatalf("state promise broken: after writing FAILURE, read back %+v, %v; want FAILURE with its error text and no results", got, err)
	} else if got.ErrorKind != fail.ErrorKind || got.ErrorDetail != fail.ErrorDetail {
		t.Errorf("state promise broken: a FAILURE's kind and detail %q %s read back as %q %s: the producer cannot test the failure's kind", fail.ErrorKind, fail.ErrorDetail, got.ErrorKind, got.ErrorDetail)
	}
}

func stateUnknown(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	st, err := c.b.GetState(c.ctx, name(t, "never-written"))
	if !errors.Is(err, errand.ErrTaskNotFound) {
		t.Fatalf("errors promise broken: GetState of an unknown task returned %+v, %v; want an error satisfying errors.Is(err, errand.ErrTaskNotFound)", st, err)
	}
	if _, err := c.b.ClaimChord(c.ctx, name(t, "no-group"), "x"); !errors.Is(err, driver.ErrGroupNotFound) {
		t.Fatalf("errors promise broken: ClaimChord of an unknown group returned %v; want driver.ErrGroupNotFound", err)
	}
}

func stateExpiry(t testing.TB, h BackendHarness) {
	exp := h.Caps.MinExpiry
	c := newBeCase(t, h, exp)
	if !h.Caps.Expiry {
		if _, ok := c.b.(driver.Expirer); ok {
			t.Fatalf("capabilities promise broken: backend implements driver.Expirer but declares no expiry")
		}
		return
	}
	if e, ok := c.b.(driver.Expirer); !ok || e.ResultExpiry() != exp {
		t.Fatalf("expiry promise broken: backend made with expiry %v reports %v", exp, e)
	}
	id := name(t, "task")
	written := time.Now()
	c.set(&errand.TaskState{TaskUUID: id, TaskName: "conformance.expiry", State: errand.StateSuccess, CreatedAt: written})
	if _, err := c.b.GetState(c.ctx, id); err != nil {
		t.Fatalf("expiry promise broken: a result was gone at once (%v), before its expiry of %v", err, exp)
	}
	// Poll until it is gone, with a deadline of expiry + slack.
	deadline := written.Add(exp*2 + h.Timing.Prompt*2)
	for {
		_, err := c.b.GetState(c.ctx, id)
		if errors.Is(err, errand.ErrTaskNotFound) {
			if gone := time.Since(written); gone < exp*9/10 {
				t.Fatalf("expiry promise broken: result gone after %v, before its expiry of %v", gone, exp)
			}
			return
		}
		if err != nil {
			t.Fatalf("GetState: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("expiry promise broken: result with expiry %v still readable after %v", exp, time.Since(written))
		}
		sleepUntil(c.ctx, time.Now().Add(exp/10))
	}
}

// stateBatch checks the batch convention of package driver on
// SetStates: a batch of many tasks' states (and two states of one task,
// stored in order) is written state by state, and the answer is nil or
// exactly one error per state.
func stateBatch(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	promise := "batch convention"
	var sts []*errand.TaskState
	for i := range 100 {
		sts = append(sts, &errand.TaskState{TaskUUID: name(t, fmt.Sprint("task", i)), TaskName: "conformance.batch", State: errand.StatePending, CreatedAt: time.Now()})
	}
	// One task's RECEIVED then STARTED, as a worker writes them: the later
	// one is its state.
	twice := name(t, "twice")
	sts = append(sts,
		&errand.TaskState{TaskUUID: twice, TaskName: "conformance.batch", State: errand.StateReceived, Attempt: 1, CreatedAt: time.Now()},
		&errand.TaskState{TaskUUID: twice, TaskName: "conformance.batch", State: errand.StateStarted, Attempt: 1, CreatedAt: time.Now()})
	errs, err := checkAnswer("SetStates", len(sts), c.b.SetStates(c.ctx, sts))
	if err != nil {
		t.Fatalf("%s promise broken: %v", promise, err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("SetStates: state %d (%s %s): %v", i, sts[i].TaskUUID, sts[i].State, err)
		}
	}
	for _, st := range sts[:100] {
		got, err := c.b.GetState(c.ctx, st.TaskUUID)
		if err != nil || got.State != errand.StatePending {
			t.Fatalf("state promise broken: state %s written by SetStates read back as %+v, %v", st.TaskUUID, got, err)
		}
	}
	if got, err := c.b.GetState(c.ctx, twice); err != nil || got.State != errand.StateStarted {
		t.Fatalf("state promise broken: a batch writing RECEIVED then STARTED of one task left it %+v, %v; want STARTED (a batch's states are stored in order)", got, err)
	}
}

func stateWait(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	id := name(t, "task")
	c.set(&errand.TaskState{TaskUUID: id, TaskName: "conformance.wait", State: errand.StateStarted, CreatedAt: time.Now()})
	br := memorybroker.New(nil)
	t.Cleanup(func() { br.Close() })
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: c.b}) // not closed: that would close c.b
	if err != nil {
		t.Fatal(err)
	}
	r := srv.Result(id)
	got := make(chan error, 1)
	go func() {
		rs, err := r.Get(c.ctx)
		if err == nil && (len(rs) != 1 || string(rs[0].Value) != "7") {
			err = fmt.Errorf("results %v, want [7]", rs)
		}
		got <- err
	}()
	// Let the waiter block before the write that must wake it.
	sleepUntil(c.ctx, time.Now().Add(h.Timing.Prompt/5))
	c.set(&errand.TaskState{TaskUUID: id, TaskName: "conformance.wait", State: errand.StateSuccess, CreatedAt: time.Now(),
		Results: []errand.Result{{Type: "int", Value: json.RawMessage("7")}}})
	timer := time.NewTimer(h.Timing.Prompt)
	defer timer.Stop()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("results promise broken: waiting for a result: %v", err)
		}
	case <-timer.C:
		t.Fatalf("results promise broken: a waiter was not told of a SUCCESS within %v", h.Timing.Prompt)
	}
}

func (c *becase) group(n int) (string, []string) {
	c.t.Helper()
	g := name(c.t, "group")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-m%03d", g, i)
	}
	if err := c.b.InitGroup(c.ctx, g, ids); err != nil {
		c.t.Fatalf("InitGroup: %v", err)
	}
	return g, ids
}

func (c *becase) complete(g, id string) (int, int) {
	c.t.Helper()
	d, n, err := c.b.CompleteGroupMember(c.ctx, g, id)
	if err != nil {
		c.t.Fatalf("CompleteGroupMember(%s): %v", id, err)
	}
	return d, n
}

func groupIdempotent(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	g, ids := c.group(3)
	steps := []struct {
		id       string
		wantDone int
	}{{ids[0], 1}, {ids[0], 1}, {ids[1], 2}, {ids[0], 2}, {ids[2], 3}, {ids[2], 3}}
	for i, s := range steps {
		d, n := c.complete(g, s.id)
		if d != s.wantDone || n != 3 {
			t.Fatalf("no double count promise broken: step %d completing %s returned %d/%d, want %d/3 (a redelivered member counts once)", i, s.id, d, n, s.wantDone)
		}
	}
	// Racing completions, each member completed by two workers at once.
	g2, ids2 := c.group(20)
	var wg sync.WaitGroup
	for _, id := range ids2 {
		for range 2 {
			wg.Go(func() {
				d, n, err := c.b.CompleteGroupMember(c.ctx, g2, id)
				if err != nil {
					t.Errorf("CompleteGroupMember: %v", err)
					return
				}
				if d > n {
					t.Errorf("no double count promise broken: a racing completion returned %d/%d", d, n)
				}
			})
		}
	}
	wg.Wait()
	if d, _ := c.complete(g2, ids2[0]); d != 20 {
		t.Fatalf("no double count promise broken: 20 members each completed twice concurrently count %d", d)
	}
}

func groupCountWithoutStates(t testing.TB, h BackendHarness) {
	// Members complete without any state written: a backend that counts by
	// reading every member's state (O(N), machinery's way) reports 0.
	c := newBeCase(t, h, 0)
	g, ids := c.group(5)
	for i, id := range ids {
		if d, n := c.complete(g, id); d != i+1 || n != 5 {
			t.Fatalf("O(1) group promise broken: completion %d returned %d/%d, want %d/5; the count must be kept by the backend, not derived from member states", i+1, d, n, i+1)
		}
	}
}

func groupNonMember(t testing.TB, h BackendHarness) {
	// Stray messages carry the group's UUID under UUIDs that are not its
	// members (issue 15): counting them fires the chord before its members
	// have finished.
	c := newBeCase(t, h, 0)
	g, ids := c.group(3)
	stray := func(id string) {
		t.Helper()
		d, n, err := c.b.CompleteGroupMember(c.ctx, g, id)
		if !errors.Is(err, driver.ErrNotMember) {
			t.Fatalf("member-only count promise broken: completing %s, not a member of group %s, returned %d/%d, %v; want an error satisfying errors.Is(err, ErrNotMember)", id, g, d, n, err)
		}
	}
	member := func(what string, id string, want int) {
		t.Helper()
		if d, n := c.complete(g, id); d != want || n != 3 {
			t.Fatalf("member-only count promise broken: completing %s returned %d/%d, want %d/3 (a UUID that is not a member must change nothing, so the chord fires at the real last member only)", what, d, n, want)
		}
	}
	for i := range 3 {
		stray(fmt.Sprintf("%s-stray%d", g, i))
	}
	member("the first member after three strays", ids[0], 1)
	stray(g + "-stray0") // the same stray again
	stray(ids[0] + "x")  // a member's UUID with a suffix
	member("the second member", ids[1], 2)
	// Another group's member is a stray here.
	g2, ids2 := c.group(2)
	stray(ids2[0])
	member("the last member", ids[2], 3)
	if d, n := c.complete(g2, ids2[0]); d != 1 || n != 2 {
		t.Fatalf("member-only count promise broken: group %s's own member completed %d/%d after being refused as a stray in group %s, want 1/2", g2, d, n, g)
	}
	stray(g + "-late")
	member("the last member again (its redelivery)", ids[2], 3)
	if won, err := c.b.ClaimChord(c.ctx, g, ids[2]); err != nil || !won {
		t.Fatalf("chord promise broken: the real last member claiming a completed group got %v, %v; it must win", won, err)
	}
}

func groupStatesInOrder(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	g, ids := c.group(12)
	// Written in reverse; read back in group order.
	for i := len(ids) - 1; i >= 0; i-- {
		if i == 5 {
			continue // member 5 has no state yet
		}
		c.set(&errand.TaskState{TaskUUID: ids[i], TaskName: "conformance.member", State: errand.StateSuccess, CreatedAt: time.Now(),
			Results: []errand.Result{{Type: "int", Value: json.RawMessage(fmt.Sprint(i))}}})
	}
	sts, err := c.b.GroupStates(c.ctx, g)
	if err != nil {
		t.Fatalf("GroupStates: %v", err)
	}
	if len(sts) != len(ids) {
		t.Fatalf("workflows promise broken: GroupStates returned %d states for %d members", len(sts), len(ids))
	}
	for i, st := range sts {
		if st.TaskUUID != ids[i] {
			t.Fatalf("workflows promise broken: GroupStates[%d] is %s, want member %s: states must come in group order", i, st.TaskUUID, ids[i])
		}
		if i == 5 {
			if st.State != errand.StatePending {
				t.Fatalf("GroupStates[5] (never written) is %s, want PENDING", st.State)
			}
			continue
		}
		if len(st.Results) != 1 || string(st.Results[0].Value) != fmt.Sprint(i) {
			t.Fatalf("workflows promise broken: GroupStates[%d] results %v, want [%d]", i, st.Results, i)
		}
	}
}

func groupOutlivesExpiry(t testing.TB, h BackendHarness) {
	exp := h.Caps.MinExpiry
	c := newBeCase(t, h, exp)
	g, ids := c.group(3)
	c.complete(g, ids[0])
	// The group stays live longer than one result expiry after its creation.
	if err := sleepUntil(c.ctx, time.Now().Add(exp+exp/2)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.b.CompleteGroupMember(c.ctx, g, ids[1]); err != nil {
		t.Fatalf("group lifetime promise broken (machinery#352): completing a member %v after the group was created, with result expiry %v: %v", exp+exp/2, exp, err)
	}
	if err := sleepUntil(c.ctx, time.Now().Add(exp+exp/2)); err != nil {
		t.Fatal(err)
	}
	d, n, err := c.b.CompleteGroupMember(c.ctx, g, ids[2])
	if err != nil || d != 3 || n != 3 {
		t.Fatalf("group lifetime promise broken (machinery#352): a live group's last completion, %v after creation with result expiry %v, returned %d/%d, %v; want 3/3",
			(exp+exp/2)*2, exp, d, n, err)
	}
	if won, err := c.b.ClaimChord(c.ctx, g, ids[2]); err != nil || !won {
		t.Fatalf("group lifetime promise broken: claiming the chord of a just-completed group returned %v, %v", won, err)
	}
}

func chordClaimOnce(t testing.TB, h BackendHarness) {
	c := newBeCase(t, h, 0)
	const k = 64
	g, ids := c.group(k)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var winners []string
	for _, id := range ids {
		wg.Go(func() {
			<-start
			won, err := c.b.ClaimChord(c.ctx, g, id)
			if err != nil {
				t.Errorf("ClaimChord(%s): %v", id, err)
				return
			}
			if won {
				mu.Lock()
				winners = append(winners, id)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("chord promise broken: %d of %d racing claimers won (%v); exactly one must", len(winners), k, winners)
	}
	if won, err := c.b.ClaimChord(c.ctx, g, winners[0]); err != nil || !won {
		t.Fatalf("chord promise broken: the winner claiming again (its redelivery after a crash) got %v, %v; it must win again", won, err)
	}
	for _, id := range ids {
		if id == winners[0] {
			continue
		}
		if won, _ := c.b.ClaimChord(c.ctx, g, id); won {
			t.Fatalf("chord promise broken: loser %s won when claiming again", id)
		}
		break
	}
}
