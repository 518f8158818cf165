package pgdb

// brokerV1 is the broker's tables at schema version 1 (see migrations).
func brokerV1(schema string) string {
	return ""
}
