// Package machinerywire translates between the message body errand
// publishes (an errand Signature's JSON) and machinery v2's Signature JSON,
// for the drivers' machinery formats (redisbroker.NewMachinery, sqsbroker's
// Options.Machinery). See docs/migrating-from-machinery.md.
package machinerywire

import (
	"encoding/json"
)

// Opaque is the key of the wrapper MachineryBody puts around a body that
// is not a signature of its message's ID (a body errand's worker never
// sends: only tests and raw tools do), so the ID and the exact bytes come
// back: {"ErrandOpaque": {"ID": id, "Body": base64}, "RoutingKey": queue}
// (the queue, so a delayed one is routed when due). machinery has no task
// of that shape; a machinery worker leaves it alone as unregistered.
const Opaque = "ErrandOpaque"

// AttemptHeader is the key of the header MachineryBody adds to a retry
// errand sends (Attempt a > 1): the JSON text {"Attempt": a, "Left": the
// RetryCount machinery reads}, as a string (machinery's AMQP broker sends
// a signature's Headers as AMQP headers, and amqp091 refuses a nested
// object there, so a retry machinery made of it would fail to publish;
// ErrandMessage also reads the object form earlier versions wrote). machinery keeps a signature's Headers when it
// republishes a task (its workers move due delayed tasks too, re-encoding
// them through its Signature, which drops errand's Attempt) and when it
// retries one (lowering RetryCount), so ErrandMessage can count the
// attempt of a body that lost its Attempt: Attempt + (Left - RetryCount).
// Without it, a retry a machinery worker moved would read as a first
// attempt while errand's state records a later one, and its retries would
// be cut short. A snoozed task's Snoozes (attempts that spent no retry)
// rides in the header too, as "Snoozes", and counts neither in Left nor
// in machinery's RetryCount. ErrandMessage removes the header.
const AttemptHeader = "ErrandAttempt"

type attemptStash struct {
	Attempt int
	Left    int
	Snoozes int `json:",omitempty"` // errand's Snoozes, which machinery drops too
}

type opaque struct {
	ID   string
	Body []byte
}

// MachineryBody turns the body errand publishes for the message id (an
// errand Signature's JSON) into machinery's: machinery reads errand's
// field names as they are (they are its own, and encoding/json matches
// Arg's lower-case keys case-insensitively), so only two things change.
// RoutingKey is set to queue when empty, since machinery routes a due
// delayed task by it. And machinery's RetryCount counts the retries left,
// where errand's counts those allowed in all beside an Attempt number: a
// retry errand sends (Attempt a > 1) carries RetryCount-(a-1), which
// ErrandMessage undoes (a snoozed task's Snoozes are attempts that spent
// no retry: RetryCount-(a-1-Snoozes)). Errand's own fields (Attempt,
// Snoozes, Timeout, Deadline, UniqueKey) ride along; machinery ignores and
// drops them.
//
// A body that is not a signature whose UUID is id (not a JSON object, a
// signed envelope — Config.Signing, which machinery workers cannot read,
// must not be used on machinery's queues —, or another ID) is wrapped
// under Opaque instead.
func MachineryBody(id string, body []byte, queue string) ([]byte, error) {
	if out, ok := Translate(id, body, queue); ok {
		return out, nil
	}
	return json.Marshal(struct {
		O          opaque `json:"ErrandOpaque"`
		RoutingKey string
	}{opaque{ID: id, Body: body}, queue})
}

// Translate is MachineryBody for a body that is the signature of id; ok
// is false (nothing done) for any other body, which a broker that keeps
// message IDs beside bodies (SQS's attributes) passes on as it is.
func Translate(id string, body []byte, queue string) (out []byte, ok bool) {
	var m map[string]json.RawMessage
	var uuid, name string
	if json.Unmarshal(body, &m) == nil {
		_ = json.Unmarshal(m["UUID"], &uuid)
		_ = json.Unmarshal(m["Name"], &name)
	}
	if m == nil || uuid == "" || uuid != id || name == "" {
		return nil, false
	}
	var rk string
	_ = json.Unmarshal(m["RoutingKey"], &rk)
	if rk == "" && queue != "" {
		m["RoutingKey"], _ = json.Marshal(queue)
	}
	var attempt, retries, snoozes int
	_ = json.Unmarshal(m["Attempt"], &attempt)
	_ = json.Unmarshal(m["RetryCount"], &retries)
	_ = json.Unmarshal(m["Snoozes"], &snoozes)
	snoozes = min(max(snoozes, 0), max(attempt-1, 0))
	if attempt > 1 {
		// The retries spent: the attempts after the first that were not
		// snoozes.
		left := max(retries-(attempt-1-snoozes), 0)
		m["RetryCount"], _ = json.Marshal(left)
		var h map[string]json.RawMessage
		if raw, ok := m["Headers"]; !ok || json.Unmarshal(raw, &h) == nil {
			if h == nil {
				h = map[string]json.RawMessage{}
			}
			st, _ := json.Marshal(attemptStash{Attempt: attempt, Left: left, Snoozes: snoozes})
			h[AttemptHeader], _ = json.Marshal(string(st))
			m["Headers"], _ = json.Marshal(h)
		}
	}
	out, err := json.Marshal(m)
	return out, err == nil
}

// UUID returns the UUID a body names ("" for a body that is not a JSON
// object with a string UUID). A broker that keeps message IDs beside
// bodies tells a body Translate changed (its UUID is its message's ID)
// from one it passed on as it was.
func UUID(body []byte) string {
	var s struct{ UUID string }
	if json.Unmarshal(body, &s) != nil {
		return ""
	}
	return s.UUID
}

// ErrandMessage reads a body taken from machinery's queue: it returns the
// message ID (the task's UUID; "" when the body names none) and errand's
// body. A body wrapped under Opaque gives back its ID and bytes. A body
// with an Attempt a > 1 (a retry errand sent) gets its RetryCount back to
// the retries allowed in all. A retry errand sent that a machinery worker
// republished (no Attempt, AttemptHeader kept) gets its Attempt back from
// the header, counting the retries machinery made since (see
// AttemptHeader). A body machinery sent (no Attempt, no header: a first
// attempt, or a retry machinery made with its RetryCount already lowered)
// is returned as it is, and so is a body that does not parse, for the
// worker to set aside.
func ErrandMessage(body []byte) (id string, out []byte) {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return "", body
	}
	if raw, ok := m[Opaque]; ok {
		var o opaque
		if json.Unmarshal(raw, &o) == nil {
			return o.ID, o.Body
		}
	}
	_ = json.Unmarshal(m["UUID"], &id)
	var attempt, retries, snoozes int
	_ = json.Unmarshal(m["Attempt"], &attempt)
	_ = json.Unmarshal(m["RetryCount"], &retries)
	_ = json.Unmarshal(m["Snoozes"], &snoozes)
	var h map[string]json.RawMessage
	_ = json.Unmarshal(m["Headers"], &h)
	raw, stashed := h[AttemptHeader]
	if stashed {
		var st attemptStash
		var text string
		if json.Unmarshal(raw, &text) == nil {
			raw = json.RawMessage(text)
		}
		if attempt <= 1 && json.Unmarshal(raw, &st) == nil && st.Attempt > 1 {
			// A machinery worker republished it (dropping Attempt), and
			// retried it Left - RetryCount times.
			attempt = st.Attempt + max(st.Left-retries, 0)
			m["Attempt"], _ = json.Marshal(attempt)
			if st.Snoozes > 0 && snoozes == 0 {
				snoozes = st.Snoozes
				m["Snoozes"], _ = json.Marshal(snoozes)
			}
		}
		delete(h, AttemptHeader)
		if len(h) == 0 {
			m["Headers"] = json.RawMessage("null")
		} else {
			m["Headers"], _ = json.Marshal(h)
		}
	}
	if attempt <= 1 && !stashed {
		return id, body
	}
	if attempt > 1 {
		snoozes = min(max(snoozes, 0), attempt-1)
		m["RetryCount"], _ = json.Marshal(retries + attempt - 1 - snoozes)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return id, body
	}
	return id, out
}
