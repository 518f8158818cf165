package pgdb

// brokerOpsV1 is the tables of the broker's optional capabilities (unique
// keys, rate limits, schedules, heartbeats, pauses) at schema version 1
// (see migrations).
func brokerOpsV1(schema string) string {
	return ""
}
