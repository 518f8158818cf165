package pgdb

// backendV1 is the result backend's tables at schema version 1 (see
// migrations).
func backendV1(schema string) string {
	return ""
}
