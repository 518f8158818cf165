package postgresbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/errand-go/errand/driver"
	"github.com/errand-go/errand/internal/pgdb"
)

// queries are the backend's statements for one schema (see the tables in
// internal/pgdb's schema_backend.go). Each is one statement: the group
// primitives are atomic on the server, never a read then a write from Go.
type queries struct {
	getState, initGroup, complete, claim, groupStates string
	sweepStates, sweepMembers, sweepGroups            string
}

func newQueries(schema string) queries {
	states, groups, members := pgdb.Table(schema, "states"), pgdb.Table(schema, "groups"), pgdb.Table(schema, "group_members")
	return queries{
		getState: pgdb.GetStateSQL(schema),

		// $1 group, $2 members in order, $3 group expiry. A group sent
		// again under its UUID starts afresh: no member done, unclaimed.
		initGroup: `WITH g AS (
  INSERT INTO ` + groups + ` AS g (id, members, total, done, claimer, expires_at)
  VALUES ($1, $2::text[], cardinality($2::text[]), 0, NULL, now() + $3::interval)
  ON CONFLICT (id) DO UPDATE SET members = excluded.members, total = excluded.total, done = 0,
    claimer = NULL, expires_at = excluded.expires_at
  RETURNING g.id
), gone AS (
  DELETE FROM ` + members + ` WHERE group_id = $1 AND NOT (task_id = ANY ($2::text[]))
)
INSERT INTO ` + members + ` (group_id, task_id)
SELECT DISTINCT g.id, m FROM g, unnest($2::text[]) AS m
ON CONFLICT (group_id, task_id) DO UPDATE SET done = false`,

		// $1 group, $2 member, $3 group expiry. The member's row turns
		// done once (a second completion finds it done and adds 0); the
		// group's count grows by what that added, only for a member of a
		// live group. Answers done and total (NULL when nothing was
		// counted) and whether the group is live.
		complete: `WITH m AS (
  UPDATE ` + members + ` SET done = true WHERE group_id = $1 AND task_id = $2 AND NOT done RETURNING 1
), g AS (
  UPDATE ` + groups + ` SET done = done + (SELECT count(*) FROM m), expires_at = now() + $3::interval
  WHERE id = $1 AND expires_at > now()
    AND EXISTS (SELECT 1 FROM ` + members + ` WHERE group_id = $1 AND task_id = $2)
  RETURNING done, total
)
SELECT (SELECT done FROM g), (SELECT total FROM g),
  EXISTS (SELECT 1 FROM ` + groups + ` WHERE id = $1 AND expires_at > now())`,

		// $1 group, $2 claimer: the first claimer is stored, and a claim
		// wins when the claimer stored is the caller. No row: no live
		// group.
		claim: `UPDATE ` + groups + ` SET claimer = coalesce(claimer, $2)
WHERE id = $1 AND expires_at > now() RETURNING claimer = $2`,

		// $1 group: each member in group order with its live state's
		// columns (NULL: none).
		groupStates: `SELECT u.id, s.body, s.created_at, s.started_at, s.finished_at, s.progress
FROM ` + groups + ` AS g CROSS JOIN LATERAL unnest(g.members) WITH ORDINALITY AS u(id, ord)
LEFT JOIN ` + states + ` AS s ON s.id = u.id AND s.expires_at > now()
WHERE g.id = $1 AND g.expires_at > now()
ORDER BY u.ord`,

		// Retention (retention.go): each deletes at most $1 expired rows,
		// skipping rows a writer holds.
		sweepStates: `DELETE FROM ` + states + ` WHERE id IN (
  SELECT id FROM ` + states + ` WHERE expires_at <= now() ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`,
		sweepMembers: `DELETE FROM ` + members + ` WHERE (group_id, task_id) IN (
  SELECT m.group_id, m.task_id FROM ` + groups + ` AS g JOIN ` + members + ` AS m ON m.group_id = g.id
  WHERE g.expires_at <= now() LIMIT $1 FOR UPDATE OF m SKIP LOCKED)`,
		sweepGroups: `DELETE FROM ` + groups + ` WHERE id IN (
  SELECT id FROM ` + groups + ` AS g WHERE expires_at <= now()
    AND NOT EXISTS (SELECT 1 FROM ` + members + ` AS m WHERE m.group_id = g.id)
  ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`,
	}
}

// InitGroup records the group's members in order, in one statement,
// inside the caller's transaction when ctx carries one
// (driver.Transactor). The group lives GroupExpiry from now, and from
// each completion.
func (b *Backend) InitGroup(ctx context.Context, g string, ids []string) error {
	if b.closed.Load() {
		return b.err(ctx, "init group", driver.ErrClosed)
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if ids == nil {
		ids = []string{}
	}
	_, err := pgdb.WriterFor(ctx, b.pool).Exec(ctx, b.q.initGroup, g, ids, b.opts.GroupExpiry)
	return b.err(ctx, "init group "+g, err)
}

// CompleteGroupMember marks the member done and counts it, in one
// statement: idempotent per member (its row turns done once), O(1) (two
// rows by their keys), and only for a member of the group
// (driver.ErrNotMember, nothing changed otherwise).
func (b *Backend) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	if b.closed.Load() {
		return 0, 0, b.err(ctx, "complete group member", driver.ErrClosed)
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var done, total *int32
	var live bool
	if err := b.pool.QueryRow(ctx, b.q.complete, g, id, b.opts.GroupExpiry).Scan(&done, &total, &live); err != nil {
		return 0, 0, b.err(ctx, "complete "+id+" in group "+g, err)
	}
	switch {
	case !live:
		return 0, 0, fmt.Errorf("postgres backend: group %s: %w", g, driver.ErrGroupNotFound)
	case done == nil:
		return 0, 0, fmt.Errorf("postgres backend: task %s, group %s: %w", id, g, driver.ErrNotMember)
	}
	return int(*done), int(*total), nil
}

// ClaimChord stores the first claimer of the group's chord, in one
// statement (an UPDATE the server serialises on the group's row): exactly
// one claimer wins, and wins again.
func (b *Backend) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	if b.closed.Load() {
		return false, b.err(ctx, "claim chord", driver.ErrClosed)
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var won bool
	err := b.pool.QueryRow(ctx, b.q.claim, g, claimer).Scan(&won)
	if pgdb.IsNoRows(err) {
		return false, fmt.Errorf("postgres backend: group %s: %w", g, driver.ErrGroupNotFound)
	}
	if err != nil {
		return false, b.err(ctx, "claim chord of group "+g, err)
	}
	return won, nil
}

// GroupStates reads every member's state in group order, in one
// statement; a member without a live state is PENDING.
func (b *Backend) GroupStates(ctx context.Context, g string) ([]*driver.TaskState, error) {
	if b.closed.Load() {
		return nil, b.err(ctx, "group states", driver.ErrClosed)
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	rows, err := b.pool.Query(ctx, b.q.groupStates, g)
	if err != nil {
		return nil, b.err(ctx, "read states of group "+g, err)
	}
	defer rows.Close()
	var out []*driver.TaskState
	for rows.Next() {
		var id string
		var body *string
		var c, s, f *time.Time
		var p *string
		if err := rows.Scan(&id, &body, &c, &s, &f, &p); err != nil {
			return nil, b.err(ctx, "read states of group "+g, err)
		}
		if body == nil {
			out = append(out, &driver.TaskState{TaskUUID: id, State: driver.StatePending})
			continue
		}
		st, err := pgdb.DecodeState(id, *body, c, s, f, p)
		if err != nil {
			return nil, fmt.Errorf("postgres backend: %w", err)
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, b.err(ctx, "read states of group "+g, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("postgres backend: group %s: %w", g, driver.ErrGroupNotFound)
	}
	return out, nil
}
