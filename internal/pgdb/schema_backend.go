package pgdb

import "strings"

// backendV1 is the result backend's tables at schema version 1 (see
// migrations), and the functions that write task states, which the
// broker calls too when it co-locates with the backend (states.go):
//
//	states         one row per task: its current state. task_name, state
//	               and attempt are the state's own (for the start rule and
//	               for operators); created_at, started_at, finished_at its
//	               times (NULL: zero), at the microsecond; body the rest,
//	               the state's JSON (internal/statejson) written with its
//	               three times zero, so the columns hold them; expires_at
//	               the end of its result expiry (a row past it is absent to
//	               every read and write, and removed by the retention sweep
//	               through the expires_at index).
//	groups         one row per group: its members in group order, its
//	               size, how many are done, the chord's claimer (NULL:
//	               unclaimed), expires_at (the group expiry after its
//	               creation and after each completion).
//	group_members  one row per member of a group: done once counted, so a
//	               redelivered member counts once. Removed with its group.
//	set_states     writes states (set_states below).
//	start_states   begins attempts (start_states below).
func backendV1(schema string) string {
	r := strings.NewReplacer(
		"{states}", Table(schema, "states"),
		"{groups}", Table(schema, "groups"),
		"{group_members}", Table(schema, "group_members"),
		"{set_states}", Table(schema, "set_states"),
		"{start_states}", Table(schema, "start_states"),
		"{channel}", quoteLiteral(StatesChannel(schema)),
	)
	return r.Replace(strings.Replace(backendDDL, "{set_states_body}", setStatesSQL(schema, setStatesFuncArgs), 1))
}

// setStatesArgs names set_states's ten arguments in setStatesSQL: the
// eight arrays of a StateArgs, the expiry (an interval) and if_absent.
type setStatesArgs struct {
	arrays           [8]string
	expiry, ifAbsent string
}

// setStatesFuncArgs are the arguments as the function set_states names
// them.
var setStatesFuncArgs = setStatesArgs{
	arrays: [8]string{"a_ids", "a_names", "a_states", "a_attempts", "a_created", "a_started", "a_finished", "a_bodies"},
	expiry: "a_expiry", ifAbsent: "a_if_absent",
}

// setStatesSQL is what set_states does, as two CTEs of one statement: w
// writes the states of args's arrays (RETURNING id and state), st is one
// row, n: how many it wrote, notifying the states channel of schema of
// each SUCCESS and FAILURE written. The function set_states runs it; a
// co-located broker statement carries it itself (SetStatesCTE), which
// saves the function call.
func setStatesSQL(schema string, args setStatesArgs) string {
	a := args.arrays
	return strings.NewReplacer("{states}", Table(schema, "states"), "{channel}", quoteLiteral(StatesChannel(schema)),
		"{arrays}", strings.Join(a[:], ", "), "{expiry}", args.expiry, "{if_absent}", args.ifAbsent).Replace(`w AS (
    INSERT INTO {states} AS t (id, task_name, state, attempt, created_at, started_at, finished_at, body, expires_at)
    SELECT DISTINCT ON (u.id COLLATE "C") u.id, u.name, u.state, u.attempt, u.created, u.started, u.finished, u.body, now() + {expiry}
    FROM unnest({arrays})
      WITH ORDINALITY AS u(id, name, state, attempt, created, started, finished, body, ord)
    ORDER BY u.id COLLATE "C", u.ord DESC -- byte order: the order start_states's callers send
    ON CONFLICT (id) DO UPDATE SET task_name = excluded.task_name, state = excluded.state,
      attempt = excluded.attempt, created_at = excluded.created_at, started_at = excluded.started_at,
      finished_at = excluded.finished_at, body = excluded.body, expires_at = excluded.expires_at
      WHERE NOT {if_absent} OR t.expires_at <= now()
    RETURNING t.id, t.state
  ), st AS (
    -- every written row counts; the finished ones also notify
    SELECT (count(*) + 0 * count(pg_notify({channel}, w.id)) FILTER (WHERE w.state IN ('SUCCESS', 'FAILURE')))::int AS n FROM w
  )`)
}

// quoteLiteral is s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// backendDDL is backendV1's SQL with its names in braces.
//
// set_states(ids, names, states, attempts, created, started, finished,
// bodies, expiry, if_absent) writes the i-th state of the arrays (the
// columns of states, one array each) to task ids[i], expiring after
// expiry; of several states of one task in the arrays, the last is
// written. It writes (and locks) the rows in the byte order of their ids,
// the order the callers of start_states sort their batches in, so two
// batches never wait for each other's rows in opposite orders. With if_absent it writes only where the task has no state (an
// expired one counts as none). It notifies the states channel with the id
// of each task it wrote SUCCESS or FAILURE for (what a result's waiter
// waits for; a waiter for another state reads on its poll, and a commit
// that notifies takes a lock every notifying commit of the database
// shares, so the writes of a task's other states notify nothing), and
// returns how many states it wrote. It is PL/pgSQL, not SQL, for its
// plan: a PL/pgSQL function keeps its statement's plan for the session,
// where an SQL function that writes plans it again at every call (about
// 0.2 ms of a co-located send's or settle's statement).
//
// start_states(ids, names, states, attempts, firsts, created, started,
// bodies, expiry) begins the i-th attempt in array order (driver.Starter):
// it reads the task's state (locking its row), decides by the start rule
// (driver.StartRequest.Allows, firsts[i] its FirstDelivery), and when
// allowed writes the i-th state with the previous state's created_at
// (the request's own when there is none) and a started_at no earlier
// than it (notifying nothing: see set_states). One row per request: ord (from
// 1), written, and the previous state's columns (all NULL: none). Two
// starts racing for a task without a state: one inserts, the other finds
// the conflict and reads the winner's row.
const backendDDL = `
CREATE TABLE {states} (
  id          text PRIMARY KEY,
  task_name   text NOT NULL,
  state       text NOT NULL,
  attempt     int NOT NULL,
  created_at  timestamptz,
  started_at  timestamptz,
  finished_at timestamptz,
  body        text NOT NULL,
  expires_at  timestamptz NOT NULL
);
CREATE INDEX ON {states} (expires_at);

CREATE TABLE {groups} (
  id         text PRIMARY KEY,
  members    text[] NOT NULL,
  total      int NOT NULL,
  done       int NOT NULL DEFAULT 0,
  claimer    text,
  expires_at timestamptz NOT NULL
);
CREATE INDEX ON {groups} (expires_at);

CREATE TABLE {group_members} (
  group_id text NOT NULL REFERENCES {groups} (id) ON DELETE CASCADE,
  task_id  text NOT NULL,
  done     bool NOT NULL DEFAULT false,
  PRIMARY KEY (group_id, task_id)
);

CREATE FUNCTION {set_states}(a_ids text[], a_names text[], a_states text[], a_attempts int[],
    a_created timestamptz[], a_started timestamptz[], a_finished timestamptz[], a_bodies text[],
    a_expiry interval, a_if_absent bool) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  wrote int;
BEGIN
  WITH {set_states_body}
  SELECT st.n INTO wrote FROM st;
  RETURN wrote;
END
$$;

CREATE FUNCTION {start_states}(a_ids text[], a_names text[], a_states text[], a_attempts int[], a_firsts bool[],
    a_created timestamptz[], a_started timestamptz[], a_bodies text[], a_expiry interval)
RETURNS TABLE (ord int, written bool, prev_name text, prev_state text, prev_attempt int,
    prev_created timestamptz, prev_started timestamptz, prev_finished timestamptz, prev_body text)
LANGUAGE plpgsql AS $$
DECLARE
  p {states}%ROWTYPE;
  c timestamptz;
  s timestamptz;
  tries int;
BEGIN
  FOR i IN 1 .. coalesce(array_length(a_ids, 1), 0) LOOP
    tries := 0;
    LOOP
      tries := tries + 1;
      SELECT * INTO p FROM {states} t WHERE t.id = a_ids[i] AND t.expires_at > now() FOR UPDATE;
      IF NOT FOUND THEN
        INSERT INTO {states} AS t (id, task_name, state, attempt, created_at, started_at, finished_at, body, expires_at)
        VALUES (a_ids[i], a_names[i], a_states[i], a_attempts[i], a_created[i], a_started[i], NULL, a_bodies[i], now() + a_expiry)
        ON CONFLICT (id) DO UPDATE SET task_name = excluded.task_name, state = excluded.state,
          attempt = excluded.attempt, created_at = excluded.created_at, started_at = excluded.started_at,
          finished_at = NULL, body = excluded.body, expires_at = excluded.expires_at
          WHERE t.expires_at <= now();
        IF FOUND THEN
          ord := i; written := true;
          prev_name := NULL; prev_state := NULL; prev_attempt := NULL;
          prev_created := NULL; prev_started := NULL; prev_finished := NULL; prev_body := NULL;
          RETURN NEXT;
          EXIT;
        END IF;
        IF tries >= 3 THEN
          RAISE EXCEPTION 'start of task %: its state changed under three tries', a_ids[i];
        END IF;
        CONTINUE; -- a concurrent start wrote it first: read its state
      END IF;
      written := NOT ((p.task_name <> '' AND p.task_name <> a_names[i])
        OR p.state IN ('SUCCESS', 'FAILURE')
        OR p.attempt > a_attempts[i]
        OR (p.state = 'STARTED' AND a_firsts[i]));
      IF written THEN
        c := coalesce(p.created_at, a_created[i]);
        s := a_started[i];
        IF s IS NOT NULL AND c IS NOT NULL AND c > s THEN
          s := c;
        END IF;
        UPDATE {states} SET task_name = a_names[i], state = a_states[i], attempt = a_attempts[i],
          created_at = c, started_at = s, finished_at = NULL, body = a_bodies[i], expires_at = now() + a_expiry
          WHERE id = a_ids[i];
      END IF;
      ord := i;
      prev_name := p.task_name; prev_state := p.state; prev_attempt := p.attempt;
      prev_created := p.created_at; prev_started := p.started_at; prev_finished := p.finished_at;
      prev_body := p.body;
      RETURN NEXT;
      EXIT;
    END LOOP;
  END LOOP;
END
$$;
`
