package pgdb

import (
	"strconv"
	"strings"
)

// The states layout as fragments of a broker's statements, for the
// co-located calls (driver.Colocation): a publish that writes PENDING, a
// fetch that begins attempts, an ack that writes final states, each one
// statement. They carry set_states's statement and call start_states
// (schema_backend.go), so what the broker writes is what the backend
// writes and reads.

// SetStatesCTE is set_states's statement as three CTEs for a broker's
// statement (after its WITH): wi the batch, w writes the states, st is
// one row whose n is how many it wrote (reference it: its count sends
// the notifications) and refused the ids of the tasks it did not write
// because they are CANCELLED (see SetStatesSQL). Its eleven arguments
// are numbered from $first: $first to $first+8 a StateArgs's Args,
// $first+9 the expiry in microseconds (an int8: a statement through a
// *sql.Tx takes no time.Duration), $first+10 if_absent. Carried in the
// statement, it is planned once with it, where a call of set_states runs
// a statement of its own.
func SetStatesCTE(schema string, first int) string {
	p := func(i int) string { return "$" + strconv.Itoa(first+i) }
	return setStatesSQL(schema, setStatesArgs{
		arrays: [9]string{p(0) + "::text[]", p(1) + "::text[]", p(2) + "::text[]", p(3) + "::int4[]",
			p(4) + "::timestamptz[]", p(5) + "::timestamptz[]", p(6) + "::timestamptz[]", p(7) + "::text[]", p(8) + "::text[]"},
		expiry:   p(9) + "::int8 * interval '1 microsecond'",
		ifAbsent: p(10) + "::bool",
	})
}

// StartFetchedSQL is a query beginning the attempts of rows, the name of
// a relation of the statement with the columns k (the order, from 1, no
// gaps), id (the task's ID), name (its task name), attempt (its attempt,
// at least 1) and first (its FirstDelivery), as driver.Starter would for
// each: RECEIVED and STARTED (only STARTED is stored) at now(), the
// statement's time — the task's CreatedAt when it has no state, else its
// state's, with a StartedAt no earlier than that (start_states), no
// progress. A CANCELLED task, as any terminal one, is not started.
// expiry is an SQL expression of the expiry's interval. One row per row
// of rows: ord (its k), written, and the previous state's StateColumns
// as prev_body, prev_created, prev_started, prev_finished, prev_progress
// (all NULL: none).
//
// The STARTED state's body is StartedBody's: what StateArgs.Append
// encodes for it.
func StartFetchedSQL(schema, rows, expiry string) string {
	return strings.NewReplacer("{start_states}", Table(schema, "start_states"), "{rows}", rows,
		"{body}", StartedBody("id", "name", "attempt"), "{expiry}", expiry).Replace(`
SELECT ord, written, prev_body, prev_created, prev_started, prev_finished, prev_progress FROM {start_states}(
	ARRAY(SELECT id FROM {rows} ORDER BY k), ARRAY(SELECT name FROM {rows} ORDER BY k),
	ARRAY(SELECT 'STARTED'::text FROM {rows} ORDER BY k), ARRAY(SELECT attempt FROM {rows} ORDER BY k),
	ARRAY(SELECT first FROM {rows} ORDER BY k),
	ARRAY(SELECT now() FROM {rows} ORDER BY k), ARRAY(SELECT now() FROM {rows} ORDER BY k),
	ARRAY(SELECT {body} FROM {rows} ORDER BY k), '{}'::text[], {expiry})`)
}

// StartedBody is an SQL expression of the body of the STARTED state of
// task id, named name, attempt attempt (SQL expressions of a text, a text
// and an int of at least 1): the JSON StateArgs.Append stores for that
// state, its three times zero (the columns hold them). A name or ID
// encoding/json would escape otherwise (HTML characters, invalid UTF-8)
// is written as PostgreSQL's to_json writes it: the same string decoded.
func StartedBody(id, name, attempt string) string {
	return `'{"task_uuid":' || to_json(` + id + `::text)::text || ',"task_name":' || to_json(` + name +
		`::text)::text || ',"state":"STARTED","attempt":' || (` + attempt + `)::text || ',"created_at":"0001-01-01T00:00:00Z"}'`
}
