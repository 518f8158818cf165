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
//	               progress is the state's Progress, the JSON as the
//	               task gave it (NULL: none), kept out of body so that it
//	               is returned byte for byte.
//	set_states     writes states (set_states below).
//	start_states   begins attempts (start_states below).
//	cancel_states  cancels tasks (cancel_states below).
func backendV1(schema string) string {
	r := strings.NewReplacer(
		"{states}", Table(schema, "states"),
		"{groups}", Table(schema, "groups"),
		"{group_members}", Table(schema, "group_members"),
		"{set_states}", Table(schema, "set_states"),
		"{start_states}", Table(schema, "start_states"),
		"{cancel_states}", Table(schema, "cancel_states"),
		"{channel}", quoteLiteral(StatesChannel(schema)),
	)
	return r.Replace(strings.Replace(backendDDL, "{set_states_body}", setStatesSQL(schema, setStatesFuncArgs), 1))
}

// setStatesArgs names set_states's eleven arguments in setStatesSQL: the
// nine arrays of a StateArgs, the expiry (an interval) and if_absent.
type setStatesArgs struct {
	arrays           [9]string
	expiry, ifAbsent string
}

// setStatesFuncArgs are the arguments as the function set_states names
// them.
var setStatesFuncArgs = setStatesArgs{
	arrays: [9]string{"a_ids", "a_names", "a_states", "a_attempts", "a_created", "a_started", "a_finished", "a_bodies", "a_progress"},
	expiry: "a_expiry", ifAbsent: "a_if_absent",
}

// setStatesSQL is what set_states does, as three CTEs of one statement:
// wi is the states of args's arrays, the last of each task, in byte
// order of their ids; w writes them (RETURNING id and state) except over
// a live CANCELLED (only a PENDING may replace it); st is one row, n:
// how many it wrote, notifying the states channel of schema of each
// SUCCESS, FAILURE and CANCELLED written, and refused: the ids of the
// states other than PENDING it did not write (with if_absent all are
// PENDING: none), which only a live CANCELLED keeps out. The function
// set_states runs it; a co-located broker statement carries it itself
// (SetStatesCTE), which saves the function call.
func setStatesSQL(schema string, args setStatesArgs) string {
	a := args.arrays
	return strings.NewReplacer("{states}", Table(schema, "states"), "{channel}", quoteLiteral(StatesChannel(schema)),
		"{arrays}", strings.Join(a[:], ", "), "{expiry}", args.expiry, "{if_absent}", args.ifAbsent).Replace(`wi AS (
    SELECT DISTINCT ON (u.id COLLATE "C") u.id, u.name, u.state, u.attempt, u.created, u.started, u.finished, u.body, u.progress
    FROM unnest({arrays})
      WITH ORDINALITY AS u(id, name, state, attempt, created, started, finished, body, progress, ord)
    ORDER BY u.id COLLATE "C", u.ord DESC
  ), w AS (
    INSERT INTO {states} AS t (id, task_name, state, attempt, created_at, started_at, finished_at, body, progress, expires_at)
    SELECT wi.id, wi.name, wi.state, wi.attempt, wi.created, wi.started, wi.finished, wi.body, wi.progress, now() + {expiry}
    FROM wi ORDER BY wi.id COLLATE "C" -- byte order: the order start_states's callers send
    ON CONFLICT (id) DO UPDATE SET task_name = excluded.task_name, state = excluded.state,
      attempt = excluded.attempt, created_at = excluded.created_at, started_at = excluded.started_at,
      finished_at = excluded.finished_at, body = excluded.body, progress = excluded.progress,
      expires_at = excluded.expires_at
      WHERE t.expires_at <= now() OR (NOT {if_absent} AND (t.state <> 'CANCELLED' OR excluded.state = 'PENDING'))
    RETURNING t.id, t.state
  ), st AS (
    -- every written row counts; the finished ones also notify
    SELECT (count(*) + 0 * count(pg_notify({channel}, w.id)) FILTER (WHERE w.state IN ('SUCCESS', 'FAILURE', 'CANCELLED')))::int AS n,
      ARRAY(SELECT wi.id FROM wi WHERE NOT {if_absent} AND wi.state <> 'PENDING' AND NOT EXISTS (SELECT FROM w WHERE w.id = wi.id)) AS refused
    FROM w
  )`)
}

// quoteLiteral is s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// backendDDL is backendV1's SQL with its names in braces.
//
// set_states(ids, names, states, attempts, created, started, finished,
// bodies, progress, expiry, if_absent) writes the i-th state of the
// arrays (the columns of states, one array each) to task ids[i], expiring
// after expiry; of several states of one task in the arrays, the last is
// written. It writes (and locks) the rows in the byte order of their ids,
// the order the callers of start_states sort their batches in, so two
// batches never wait for each other's rows in opposite orders. With if_absent it writes only where the task has no state (an
// expired one counts as none). Over a live CANCELLED state it writes only
// a PENDING (driver.Canceller: a cancel is never overwritten). It
// notifies the states channel with the id of each task it wrote SUCCESS,
// FAILURE or CANCELLED for (what a result's waiter waits for; a waiter
// for another state reads on its poll, and a commit that notifies takes
// a lock every notifying commit of the database shares, so the writes of
// a task's other states notify nothing), and returns n, how many states
// it wrote, and refused, the ids of the tasks it did not write because
// they are CANCELLED. It is PL/pgSQL, not SQL, for its
// plan: a PL/pgSQL function keeps its statement's plan for the session,
// where an SQL function that writes plans it again at every call (about
// 0.2 ms of a co-located send's or settle's statement).
//
// start_states(ids, names, states, attempts, firsts, created, started,
// bodies, progress, expiry) begins the i-th attempt in array order (driver.Starter):
// it reads the task's state (locking its row), decides by the start rule
// (driver.StartRequest.Allows, firsts[i] its FirstDelivery), and when
// allowed writes the i-th state with the previous state's created_at
// (the request's own when there is none) and a started_at no earlier
// than it (notifying nothing: see set_states). One row per request: ord (from
// 1), written, and the previous state's columns (all NULL: none). Two
// starts racing for a task without a state: one inserts, the other finds
// the conflict and reads the winner's row.
//
// cancel_states(ids, tails, created, finished, progress, expiry) cancels
// the i-th task in array order (driver.Canceller): it reads the task's
// live state (locking its row) and, unless it has none or it is
// terminal, writes CANCELLED keeping its task_name, attempt, created_at
// (created[i] when it has none) and started_at, with a finished_at no
// earlier than those (finished[i] otherwise, the statement's time when
// it is NULL), progress[i] or else its
// progress, and a body of its id, name, state and attempt followed by
// tails[i] (CancelTail), notifying the states channel. One row per task:
// ord (from 1), written, and the previous state's columns (all NULL:
// none).
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
  progress    text,
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
    a_progress text[], a_expiry interval, a_if_absent bool, OUT n int, OUT refused text[])
LANGUAGE plpgsql AS $$
BEGIN
  WITH {set_states_body}
  SELECT st.n, st.refused INTO n, refused FROM st;
END
$$;

CREATE FUNCTION {start_states}(a_ids text[], a_names text[], a_states text[], a_attempts int[], a_firsts bool[],
    a_created timestamptz[], a_started timestamptz[], a_bodies text[], a_progress text[], a_expiry interval)
RETURNS TABLE (ord int, written bool, prev_name text, prev_state text, prev_attempt int,
    prev_created timestamptz, prev_started timestamptz, prev_finished timestamptz, prev_body text, prev_progress text)
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
        INSERT INTO {states} AS t (id, task_name, state, attempt, created_at, started_at, finished_at, body, progress, expires_at)
        VALUES (a_ids[i], a_names[i], a_states[i], a_attempts[i], a_created[i], a_started[i], NULL, a_bodies[i], a_progress[i], now() + a_expiry)
        ON CONFLICT (id) DO UPDATE SET task_name = excluded.task_name, state = excluded.state,
          attempt = excluded.attempt, created_at = excluded.created_at, started_at = excluded.started_at,
          finished_at = NULL, body = excluded.body, progress = excluded.progress, expires_at = excluded.expires_at
          WHERE t.expires_at <= now();
        IF FOUND THEN
          ord := i; written := true;
          prev_name := NULL; prev_state := NULL; prev_attempt := NULL;
          prev_created := NULL; prev_started := NULL; prev_finished := NULL; prev_body := NULL; prev_progress := NULL;
          RETURN NEXT;
          EXIT;
        END IF;
        IF tries >= 3 THEN
          RAISE EXCEPTION 'start of task %: its state changed under three tries', a_ids[i];
        END IF;
        CONTINUE; -- a concurrent start wrote it first: read its state
      END IF;
      written := NOT ((p.task_name <> '' AND p.task_name <> a_names[i])
        OR p.state IN ('SUCCESS', 'FAILURE', 'CANCELLED')
        OR p.attempt > a_attempts[i]
        OR (p.state = 'STARTED' AND a_firsts[i]));
      IF written THEN
        c := coalesce(p.created_at, a_created[i]);
        s := a_started[i];
        IF s IS NOT NULL AND c IS NOT NULL AND c > s THEN
          s := c;
        END IF;
        UPDATE {states} SET task_name = a_names[i], state = a_states[i], attempt = a_attempts[i],
          created_at = c, started_at = s, finished_at = NULL, body = a_bodies[i], progress = a_progress[i],
          expires_at = now() + a_expiry
          WHERE id = a_ids[i];
      END IF;
      ord := i;
      prev_name := p.task_name; prev_state := p.state; prev_attempt := p.attempt;
      prev_created := p.created_at; prev_started := p.started_at; prev_finished := p.finished_at;
      prev_body := p.body; prev_progress := p.progress;
      RETURN NEXT;
      EXIT;
    END LOOP;
  END LOOP;
END
$$;

CREATE FUNCTION {cancel_states}(a_ids text[], a_tails text[], a_created timestamptz[], a_finished timestamptz[],
    a_progress text[], a_expiry interval)
RETURNS TABLE (ord int, written bool, prev_body text, prev_created timestamptz, prev_started timestamptz,
    prev_finished timestamptz, prev_progress text)
LANGUAGE plpgsql AS $$
DECLARE
  p {states}%ROWTYPE;
  c timestamptz;
BEGIN
  FOR i IN 1 .. coalesce(array_length(a_ids, 1), 0) LOOP
    ord := i;
    SELECT * INTO p FROM {states} t WHERE t.id = a_ids[i] AND t.expires_at > now() FOR UPDATE;
    IF NOT FOUND THEN
      written := false;
      prev_body := NULL; prev_created := NULL; prev_started := NULL; prev_finished := NULL; prev_progress := NULL;
      RETURN NEXT;
      CONTINUE;
    END IF;
    written := p.state NOT IN ('SUCCESS', 'FAILURE', 'CANCELLED');
    IF written THEN
      c := coalesce(p.created_at, a_created[i]);
      UPDATE {states} SET state = 'CANCELLED', created_at = c,
        finished_at = greatest(coalesce(a_finished[i], now()), c, p.started_at),
        body = '{"task_uuid":' || to_json(p.id)::text || ',"task_name":' || to_json(p.task_name)::text ||
          ',"state":"CANCELLED"' || CASE WHEN p.attempt <> 0 THEN ',"attempt":' || p.attempt::text ELSE '' END || a_tails[i],
        progress = coalesce(a_progress[i], p.progress), expires_at = now() + a_expiry
        WHERE id = a_ids[i];
      PERFORM pg_notify({channel}, a_ids[i]);
    END IF;
    prev_body := p.body; prev_created := p.created_at; prev_started := p.started_at;
    prev_finished := p.finished_at; prev_progress := p.progress;
    RETURN NEXT;
  END LOOP;
END
$$;
`
