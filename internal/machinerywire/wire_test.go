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
	})
}
