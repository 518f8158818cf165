// Package machinerywire translates between the message body errand
// publishes (an errand Signature's JSON) and machinery v2's Signature JSON,
// for the drivers' machinery formats (redisbroker.NewMachinery, sqsbroker's
// Options.Machinery). See docs/migrating-from-machinery.md.
package machinerywire

import (
	"encoding/json"
	"fmt"
)

// MachineryBody turns the body errand publishes (an errand Signature's
// JSON) into machinery's: machinery reads errand's field names as they are
// (they are its own, and encoding/json matches Arg's lower-case keys
// case-insensitively), so only two things change. RoutingKey is set to
// queue when empty, since machinery routes a due delayed task by it. And
// machinery's RetryCount counts the retries left, where errand's counts
// those allowed in all beside an Attempt number: a retry errand sends
// (Attempt a > 1) carries RetryCount-(a-1), which ErrandBody undoes.
// Errand's own fields (Attempt, Timeout, Deadline, UniqueKey) ride along;
// machinery ignores and drops them. A body that is not a JSON object (a
// signed envelope: Config.Signing cannot be used here) is an error.
func MachineryBody(body []byte, queue string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("not a signature's JSON (machinery's queues take unsigned signatures only): %w", err)
	}
	var rk string
	_ = json.Unmarshal(m["RoutingKey"], &rk)
	if rk == "" && queue != "" {
		m["RoutingKey"], _ = json.Marshal(queue)
	}
	var attempt, retries int
	_ = json.Unmarshal(m["Attempt"], &attempt)
	_ = json.Unmarshal(m["RetryCount"], &retries)
	if attempt > 1 {
		m["RetryCount"], _ = json.Marshal(max(retries-(attempt-1), 0))
	}
	return json.Marshal(m)
}

// ErrandBody undoes MachineryBody's RetryCount change on a body taken from
// machinery's queue: a body with an Attempt a > 1 (sent by errand) gets
// its RetryCount back to the retries allowed in all. A body machinery
// sent (no Attempt: a first attempt, or a retry machinery made with its
// RetryCount already lowered) is returned as it is. A body that does not
// parse is returned as it is, for the worker to set aside.
func ErrandBody(body []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	var attempt, retries int
	_ = json.Unmarshal(m["Attempt"], &attempt)
	if attempt <= 1 {
		return body
	}
	_ = json.Unmarshal(m["RetryCount"], &retries)
	m["RetryCount"], _ = json.Marshal(retries + attempt - 1)
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}
