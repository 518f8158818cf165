package redisbroker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/errand-go/errand/driver"
)

// ArchivePreview is the most bytes of a body an archive entry keeps of a
// message the fetch script set aside for its size (the entry's Size is
// the whole body's), and the most bytes of an archive entry Archived
// lists: a longer entry (one written whole by Archive, or by a version
// before this bound) is listed by its task ID and size alone, and
// ArchivedEntry reads it whole. 1 MiB: DefaultMaxPayload, so every
// message the default bound lets through lists whole.
const ArchivePreview = 1 << 20

// maxMessageID is the longest entry of a queue's due lists the fetch
// script looks up as a message ID: a longer one is foreign text (message
// IDs are 24 hex digits, with the task's attempt and name when it carries
// starts).
const maxMessageID = 64 << 10

// listedEntryMax is the longest archive entry Archived reads: a body of
// ArchivePreview bytes, with room for its JSON line and task ID.
const listedEntryMax = ArchivePreview + 64<<10

// entryMeta is the JSON line that starts an archive entry (see
// scripts.go); the envelope follows it.
type entryMeta struct {
	Reason    string    `json:"reason,omitempty"`
	Error     string    `json:"error,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	At        time.Time `json:"at_time,omitzero"`
	AtMs      int64     `json:"at,omitempty"` // entries moved from an older version's dead letters
	NotBefore time.Time `json:"not_before,omitzero"`
	Priority  uint8     `json:"priority,omitempty"`
	// Size is the body's size when the entry keeps only its first
	// ArchivePreview bytes (set aside by fetch).
	Size int `json:"size,omitempty"`
}

func encodeEntry(e driver.ArchiveEntry) (string, error) {
	meta, err := json.Marshal(entryMeta{Reason: e.Reason, Error: e.Error, Attempts: e.Attempts,
		At: e.At, NotBefore: e.NotBefore, Priority: e.Priority})
	if err != nil {
		return "", err
	}
	return string(meta) + "\n" + e.ID + "\n" + string(e.Body), nil
}

func decodeEntry(queue, s string) (driver.ArchiveEntry, error) {
	line, env, ok := strings.Cut(s, "\n")
	var m entryMeta
	if !ok {
		return driver.ArchiveEntry{}, fmt.Errorf("redis broker: archive entry of queue %q without an envelope", queue)
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return driver.ArchiveEntry{}, fmt.Errorf("redis broker: archive entry of queue %q: %w", queue, err)
	}
	id, body, _ := strings.Cut(env, "\n")
	at := m.At
	if at.IsZero() && m.AtMs != 0 {
		at = time.UnixMilli(m.AtMs)
	}
	e := driver.ArchiveEntry{
		Message: driver.Message{ID: id, Queue: queue, Body: []byte(body), NotBefore: m.NotBefore, Priority: m.Priority},
		Reason:  m.Reason, Error: m.Error, Attempts: m.Attempts, At: at,
	}
	if m.Size > len(body) {
		e.Size = m.Size
	}
	return e, nil
}

// Archive removes d from its queue like Ack (ErrLeaseLost likewise) and
// keeps e in the queue's archive, trimmed to keep, all in one script. The
// archive is ordered by e.At (now when zero); keep.MaxAge is measured
// against the Redis server's clock.
func (b *Broker) Archive(ctx context.Context, d *driver.Delivery, e driver.ArchiveEntry, keep driver.Retention) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if e.ID == "" {
		e.Message = d.Message // the contract: no message given keeps d's
	}
	if strings.ContainsRune(e.ID, '\n') {
		return fmt.Errorf("redis broker: archive: message ID %q contains a newline", e.ID)
	}
	entry, err := encodeEntry(e)
	if err != nil {
		return fmt.Errorf("redis broker: archive %q: %w", e.ID, err)
	}
	k := b.keys(d.Queue)
	return b.settle(ctx, d, archiveScript, k.archiveKeys(),
		e.ID, e.At.UnixMilli(), entry, max(keep.MaxCount, 0), max(keep.MaxAge.Milliseconds(), 0))
}

// migrate moves the dead letters an older version kept (K:dead) into the
// archive of queue. It runs before every read of the archive (and Stats),
// not once: during a rolling upgrade the older workers still write K:dead.
// Where K:dead does not exist the script returns at once (one EXISTS).
func (b *Broker) migrate(ctx context.Context, queue string) error {
	k := b.keys(queue)
	if err := migrateScript.Run(ctx, b.scripts, k.migrateKeys()).Err(); err != nil {
		return b.err(ctx, err)
	}
	return nil
}

// Archived returns a page of queue's archive, newest first, in one
// script. An offset below 0 or a limit below 1 is an error.
func (b *Broker) Archived(ctx context.Context, queue string, offset, limit int) ([]driver.ArchiveEntry, error) {
	if offset < 0 || limit < 1 {
		return nil, fmt.Errorf("redis broker: Archived: offset %d, limit %d: want offset >= 0 and limit >= 1", offset, limit)
	}
	return b.archivedPage(ctx, queue, offset, limit)
}

// archivedPage is Archived with limit < 0 meaning every entry from offset
// on.
func (b *Broker) archivedPage(ctx context.Context, queue string, offset, limit int) ([]driver.ArchiveEntry, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if limit == 0 {
		return nil, nil
	}
	if err := b.migrate(ctx, queue); err != nil {
		return nil, err
	}
	offset = max(offset, 0)
	stop := -1
	if limit > 0 {
		stop = offset + limit - 1
	}
	k := b.keys(queue)
	ss, err := archivedScript.Run(ctx, b.scripts, k.archivedKeys(), offset, stop, listedEntryMax).StringSlice()
	if err != nil {
		return nil, b.err(ctx, err)
	}
	out := make([]driver.ArchiveEntry, 0, len(ss))
	for i := 0; i+1 < len(ss); i += 2 {
		if ss[i] != "" {
			// An entry over listedEntryMax: its task ID and length.
			n, _ := strconv.Atoi(ss[i+1])
			out = append(out, driver.ArchiveEntry{Message: driver.Message{ID: ss[i], Queue: queue}, Size: n,
				Reason: fmt.Sprintf("archive entry of %d bytes, too large to list (over %d): ArchivedEntry reads it", n, listedEntryMax)})
			continue
		}
		e, err := decodeEntry(queue, ss[i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// ArchivedEntry returns the archive entry of task id, or
// driver.ErrNotArchived.
func (b *Broker) ArchivedEntry(ctx context.Context, queue, id string) (driver.ArchiveEntry, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if err := b.migrate(ctx, queue); err != nil {
		return driver.ArchiveEntry{}, err
	}
	s, err := b.rdb.HGet(ctx, b.keys(queue).archived, id).Result()
	if err == goredis.Nil {
		return driver.ArchiveEntry{}, fmt.Errorf("redis broker: %q of queue %q: %w", id, queue, driver.ErrNotArchived)
	}
	if err != nil {
		return driver.ArchiveEntry{}, b.err(ctx, err)
	}
	return decodeEntry(queue, s)
}

// Requeue removes id from queue's archive and enqueues m on queue (the
// delayed set when m.NotBefore is in the future) in one script, sent in
// one pipeline with the addition of queue to the set Queues reads. m must
// be for queue (m.Queue empty or queue): on Redis Cluster another queue's
// keys live in another slot, so the step could not be atomic.
func (b *Broker) Requeue(ctx context.Context, queue, id string, m driver.Message) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if m.Queue != "" && m.Queue != queue {
		return fmt.Errorf("redis broker: requeue %q from the archive of queue %q onto another queue %q: not supported", id, queue, m.Queue)
	}
	if err := b.checkMessage(m); err != nil {
		return err
	}
	if err := b.migrate(ctx, queue); err != nil {
		return err
	}
	k := b.keys(queue)
	env := m.ID + "\n" + string(m.Body)
	var res *goredis.Cmd
	_, err := b.pipelined(ctx, func(pipe goredis.Pipeliner, eval evalFunc) {
		pipe.SAdd(ctx, b.global("queues"), queue)
		res = eval(requeueScript, ctx, pipe, k.requeueKeys(),
			id, randomID(), env, dueMillis(m.NotBefore), m.Priority)
	})
	if err != nil {
		return b.err(ctx, err)
	}
	if n, _ := res.Int(); n == notArchived {
		return fmt.Errorf("redis broker: requeue %q of queue %q: %w", id, queue, driver.ErrNotArchived)
	}
	return nil
}

// DeleteArchived removes ids from queue's archive in one script.
func (b *Broker) DeleteArchived(ctx context.Context, queue string, ids ...string) (int, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if len(ids) == 0 {
		return 0, nil
	}
	if err := b.migrate(ctx, queue); err != nil {
		return 0, err
	}
	k := b.keys(queue)
	n, err := deleteArchivedScript.Run(ctx, b.scripts, k.deleteArchivedKeys(), anys(ids)...).Int()
	return n, b.err(ctx, err)
}
