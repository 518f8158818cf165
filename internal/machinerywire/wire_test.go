package machinerywire

import (
	"encoding/json"
	"testing"
)

func field[T any](t *testing.T, body []byte, name string) T {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	var v T
	if raw, ok := m[name]; ok {
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// A retry errand sends carries machinery's retries-left count, and comes
// back to errand as the retries allowed in all.
func TestRetryCountRoundTrip(t *testing.T) {
	errandBody := []byte(`{"UUID":"u1","Name":"t","RoutingKey":"","RetryCount":5,"Attempt":3,"Args":[{"name":"","type":"int64","value":1}]}`)
	m, err := MachineryBody("u1", errandBody, "q")
	if err != nil {
		t.Fatal(err)
	}
	if got := field[int](t, m, "RetryCount"); got != 3 {
		t.Errorf("machinery's RetryCount of attempt 3 of 6 = %d, want 3 retries left", got)
	}
	if got := field[string](t, m, "RoutingKey"); got != "q" {
		t.Errorf("RoutingKey = %q, want the queue q: machinery routes a due delayed task by it", got)
	}
	id, back := ErrandMessage(m)
	if id != "u1" {
		t.Errorf("ID %q, want the task's UUID u1", id)
	}
	if got := field[int](t, back, "RetryCount"); got != 5 {
		t.Errorf("errand's RetryCount after the round trip = %d, want 5", got)
	}
}

// A body machinery sent (no Attempt) is errand's as it is.
func TestMachineryBodyUntouched(t *testing.T) {
	b := []byte(`{"UUID":"u1","Name":"t","RoutingKey":"q","RetryCount":2}`)
	if id, got := ErrandMessage(b); string(got) != string(b) || id != "u1" {
		t.Errorf("ErrandMessage changed a machinery body: %s, %q", got, id)
	}
	if _, got := ErrandMessage([]byte("not json")); string(got) != "not json" {
		t.Errorf("ErrandMessage changed a body it cannot parse: %s", got)
	}
	for _, body := range []string{"opaque \x00 bytes", `{"conformance":"x"}`, `{"UUID":"other","Name":"t"}`} {
		w, err := MachineryBody("id-1", []byte(body), "q")
		if err != nil {
			t.Fatal(err)
		}
		if id, got := ErrandMessage(w); id != "id-1" || string(got) != body {
			t.Errorf("a body that is not the message's signature came back as %q, %q; want id-1, %q", id, got, body)
		}
	}
	m, err := MachineryBody("u", []byte(`{"UUID":"u","Name":"t","RoutingKey":"other"}`), "q")
	if err != nil || field[string](t, m, "RoutingKey") != "other" {
		t.Errorf("a RoutingKey already set must stay: %s, %v", m, err)
	}
}

func FuzzRoundTrip(f *testing.F) {
	f.Add(5, 3)
	f.Add(0, 1)
	f.Add(2, 9)
	f.Fuzz(func(t *testing.T, retries, attempt int) {
		if retries < 0 || attempt < 1 || retries > 1<<20 || attempt > retries+1 {
			return // errand never sends an attempt beyond its retries
		}
		b, _ := json.Marshal(map[string]any{"UUID": "u", "Name": "n", "RetryCount": retries, "Attempt": attempt})
		m, err := MachineryBody("u", b, "q")
		if err != nil {
			t.Fatal(err)
		}
		_, back := ErrandMessage(m)
		if got := field[int](t, back, "RetryCount"); got != retries {
			t.Errorf("RetryCount %d, attempt %d: %d after the round trip", retries, attempt, got)
		}
		// Moved by a machinery worker (Attempt dropped): the same task.
		_, back = ErrandMessage(machineryRepublish(t, m, 0))
		if got := field[int](t, back, "RetryCount"); got != retries {
			t.Errorf("RetryCount %d, attempt %d: %d after machinery moved it", retries, attempt, got)
		}
		if got := max(field[int](t, back, "Attempt"), 1); got != attempt {
			t.Errorf("RetryCount %d, attempt %d: attempt %d after machinery moved it", retries, attempt, got)
		}
	})
}

// machineryRepublish re-encodes body as a machinery worker does when it
// moves a due delayed task (or retries one, lowering RetryCount by
// retries): through machinery v2's Signature, which has none of errand's
// fields.
func machineryRepublish(t *testing.T, body []byte, retries int) []byte {
	t.Helper()
	var s struct {
		UUID, Name, RoutingKey string
		ETA                    *json.RawMessage
		GroupUUID              string
		GroupTaskCount         int
		Args                   []struct {
			Name, Type string
			Value      any
		}
		Headers                     map[string]any
		Priority                    uint8
		Immutable                   bool
		RetryCount, RetryTimeout    int
		OnSuccess, OnError          []json.RawMessage
		ChordCallback               *json.RawMessage
		BrokerMessageGroupId        string
		SQSReceiptHandle            string
		StopTaskDeletionOnError     bool
		IgnoreWhenTaskNotRegistered bool
	}
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	s.RetryCount -= retries
	out, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A retry errand sent keeps its attempt when a machinery worker moves it
// from the delayed set (dropping errand's Attempt), and counts the retries
// a machinery worker made of it: errand neither cuts its retries short nor
// gives it more.
func TestAttemptSurvivesMachineryRepublish(t *testing.T) {
	errandBody := []byte(`{"UUID":"u1","Name":"t","RoutingKey":"","RetryCount":5,"Attempt":3,"Headers":{"trace":"x"}}`)
	m, err := MachineryBody("u1", errandBody, "q")
	if err != nil {
		t.Fatal(err)
	}
	for retried := range 3 {
		_, back := ErrandMessage(machineryRepublish(t, m, retried))
		if got, want := field[int](t, back, "Attempt"), 3+retried; got != want {
			t.Errorf("attempt after machinery moved it and retried it %d times = %d, want %d", retried, got, want)
		}
		if got := field[int](t, back, "RetryCount"); got != 5 {
			t.Errorf("errand's RetryCount after machinery moved it and retried it %d times = %d, want 5", retried, got)
		}
		if h := field[map[string]any](t, back, "Headers"); len(h) != 1 || h["trace"] != "x" {
			t.Errorf("headers after the round trip = %v, want the task's own only", h)
		}
	}
	_, back := ErrandMessage(m)
	if h := field[map[string]any](t, back, "Headers"); len(h) != 1 || h["trace"] != "x" {
		t.Errorf("headers of errand's own retry read back = %v, want the task's own only", h)
	}
	_, back = ErrandMessage(must(MachineryBody("u2", []byte(`{"UUID":"u2","Name":"t","RetryCount":2,"Attempt":2}`), "q")))
	if h := field[map[string]any](t, back, "Headers"); h != nil {
		t.Errorf("headers of a retry sent without any = %v, want none", h)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// The attempt header holds only a string: machinery's AMQP broker sends a
// signature's Headers as AMQP headers, where a nested object cannot go
// (amqp091 refuses it, and machinery's retry of the task would fail to
// publish). The object form earlier versions wrote is still read.
func TestAttemptHeaderIsAString(t *testing.T) {
	m := must(MachineryBody("u1", []byte(`{"UUID":"u1","Name":"t","RetryCount":5,"Attempt":3}`), "q"))
	h := field[map[string]any](t, m, "Headers")
	if _, ok := h[AttemptHeader].(string); !ok {
		t.Fatalf("%s header = %#v, want a string (AMQP headers carry no nested objects)", AttemptHeader, h[AttemptHeader])
	}
	old := []byte(`{"UUID":"u1","Name":"t","RetryCount":2,"Headers":{"` + AttemptHeader + `":{"Attempt":3,"Left":2}}}`)
	if _, back := ErrandMessage(old); field[int](t, back, "Attempt") != 3 {
		t.Errorf("the object form of the header read back as attempt %d, want 3", field[int](t, back, "Attempt"))
	}
}

// A snoozed task's Snoozes are attempts that spent no retry: machinery's
// RetryCount (retries left) does not count them, and errand's RetryCount
// and Snoozes come back as sent, directly and after a machinery worker
// moved the message (dropping Attempt and Snoozes) and retried it.
func TestSnoozesRoundTrip(t *testing.T) {
	// RetryCount 1, three snoozes and one retry so far: attempt 5, one
	// retry left.
	errandBody := []byte(`{"UUID":"u1","Name":"t","RetryCount":1,"Attempt":5,"Snoozes":3}`)
	m, err := MachineryBody("u1", errandBody, "q")
	if err != nil {
		t.Fatal(err)
	}
	if got := field[int](t, m, "RetryCount"); got != 0 {
		t.Errorf("machinery's RetryCount of a task with RetryCount 1 that retried once and snoozed 3 times = %d, want 0 retries left", got)
	}
	for retried := range 2 {
		msg := m
		if retried > 0 {
			msg = machineryRepublish(t, m, 0)
		}
		_, back := ErrandMessage(msg)
		if a, r, s := field[int](t, back, "Attempt"), field[int](t, back, "RetryCount"), field[int](t, back, "Snoozes"); a != 5 || r != 1 || s != 3 {
			t.Errorf("read back (machinery moved it: %v): Attempt %d, RetryCount %d, Snoozes %d; want 5, 1, 3", retried > 0, a, r, s)
		}
	}
	// Snoozes only, RetryCount 0: nothing left, nothing spent.
	_, back := ErrandMessage(must(MachineryBody("u2", []byte(`{"UUID":"u2","Name":"t","RetryCount":0,"Attempt":4,"Snoozes":3}`), "q")))
	if r := field[int](t, back, "RetryCount"); r != 0 {
		t.Errorf("errand's RetryCount of a task that only snoozed = %d after the round trip, want 0", r)
	}
}
