package memcachebackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/errand-go/errand/driver"
)

// Options configures a Backend.
type Options struct {
	// Prefix starts every key. Default: "errand".
	Prefix string
	// ResultExpiry is how long a state is kept after its last write (rounded
	// up to whole seconds, plus one). Default: 1h.
	ResultExpiry time.Duration
	// GroupExpiry is how long group metadata is kept after the group's last
	// completion. Default: 24h; never less than ResultExpiry.
	GroupExpiry time.Duration
	// MaxItemSize is the largest item the server stores (memcached -I).
	// Default: 1 MiB.
	MaxItemSize int
	// CloseClient: Close also closes the client (set by Open).
	CloseClient bool
}

// Backend is a driver.Backend on memcached. It is safe for concurrent use.
type Backend struct {
	mc     *memcache.Client
	opts   Options
	closed atomic.Bool
}

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Expirer = (*Backend)(nil)
)

// New returns a backend on mc. opts may be nil.
func New(mc *memcache.Client, opts *Options) *Backend {
	b := &Backend{mc: mc}
	if opts != nil {
		b.opts = *opts
	}
	if b.opts.Prefix == "" {
		b.opts.Prefix = "errand"
	}
	b.opts.ResultExpiry, b.opts.GroupExpiry = driver.ExpiryDefaults(b.opts.ResultExpiry, b.opts.GroupExpiry)
	if b.opts.MaxItemSize <= 0 {
		b.opts.MaxItemSize = 1 << 20
	}
	return b
}

func init() { driver.RegisterBackend("memcache", Open) }

// Open returns a backend for a memcache:// URL (see the package doc).
func Open(_ context.Context, u *url.URL) (driver.Backend, error) {
	if u.Host == "" {
		return nil, errors.New("memcache backend: URL names no server")
	}
	opts := &Options{CloseClient: true, Prefix: u.Query().Get("prefix")}
	if err := driver.DurationParams(u.Query(), map[string]*time.Duration{"result_expiry": &opts.ResultExpiry, "group_expiry": &opts.GroupExpiry}); err != nil {
		return nil, fmt.Errorf("memcache backend: %w", err)
	}
	mc := memcache.New(strings.Split(u.Host, ",")...)
	if err := mc.Ping(); err != nil {
		mc.Close()
		return nil, fmt.Errorf("memcache backend: ping %s: %w", u.Host, err)
	}
	return New(mc, opts), nil
}

// ResultExpiry returns the configured result expiry.
func (b *Backend) ResultExpiry() time.Duration { return b.opts.ResultExpiry }

// seconds converts an expiry to memcached's whole seconds, never early.
// memcached reads more than 30 days as an absolute Unix time.
func seconds(d time.Duration) int32 {
	s := int64((d+time.Second-1)/time.Second) + 1
	if s > 30*24*3600 {
		s += time.Now().Unix()
	}
	return int32(s)
}

func (b *Backend) taskKey(id string) string { return b.opts.Prefix + ":task:" + id }
func (b *Backend) groupKey(g, part string) string {
	return b.opts.Prefix + ":group:" + g + ":" + part
}

func (b *Backend) err(err error) error {
	switch {
	case err == nil:
		return nil
	case b.closed.Load():
		return fmt.Errorf("memcache backend: %w", driver.ErrClosed)
	}
	return fmt.Errorf("memcache backend: %w", err)
}

func (b *Backend) check(ctx context.Context) error {
	return ctx.Err()
}

func (b *Backend) item(key string, v []byte, exp time.Duration) (*memcache.Item, error) {
	if len(v)+len(key)+64 > b.opts.MaxItemSize {
		return nil, fmt.Errorf("memcache backend: %s is %d bytes, over the item size limit of %d bytes (memcached -I)", key, len(v), b.opts.MaxItemSize)
	}
	return &memcache.Item{Key: key, Value: v, Expiration: seconds(exp)}, nil
}

// SetState writes st as one item.
func (b *Backend) SetState(ctx context.Context, st *driver.TaskState) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	v, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("memcache backend: encode state of %s: %w", st.TaskUUID, err)
	}
	it, err := b.item(b.taskKey(st.TaskUUID), v, b.opts.ResultExpiry)
	if err != nil {
		return err
	}
	return b.err(b.mc.Set(it))
}

// GetState reads the task's state.
func (b *Backend) GetState(ctx context.Context, id string) (*driver.TaskState, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	it, err := b.mc.Get(b.taskKey(id))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil, fmt.Errorf("memcache backend: task %s: %w", id, driver.ErrTaskNotFound)
	}
	if err != nil {
		return nil, b.err(err)
	}
	return decodeState(id, it.Value)
}

func decodeState(id string, v []byte) (*driver.TaskState, error) {
	var st driver.TaskState
	if err := json.Unmarshal(v, &st); err != nil {
		return nil, fmt.Errorf("memcache backend: decode state of %s: %w", id, err)
	}
	return &st, nil
}

// InitGroup stores the member list and a zero counter.
func (b *Backend) InitGroup(ctx context.Context, g string, ids []string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	v, _ := json.Marshal(ids)
	members, err := b.item(b.groupKey(g, "members"), v, b.opts.GroupExpiry)
	if err != nil {
		return fmt.Errorf("%w (a group of %d members)", err, len(ids))
	}
	count, _ := b.item(b.groupKey(g, "count"), []byte("0"), b.opts.GroupExpiry)
	for _, it := range []*memcache.Item{count, members} {
		if err := b.mc.Set(it); err != nil {
			return b.err(err)
		}
	}
	return nil
}

func (b *Backend) members(g string) ([]string, error) {
	it, err := b.mc.Get(b.groupKey(g, "members"))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil, fmt.Errorf("memcache backend: group %s: %w", g, driver.ErrGroupNotFound)
	}
	if err != nil {
		return nil, b.err(err)
	}
	var ids []string
	if err := json.Unmarshal(it.Value, &ids); err != nil {
		return nil, fmt.Errorf("memcache backend: group %s: decode members: %w", g, err)
	}
	return ids, nil
}

// CompleteGroupMember adds the member's marker and, if it was new, increments
// the group's counter.
func (b *Backend) CompleteGroupMember(ctx context.Context, g, id string) (int, int, error) {
	if err := b.check(ctx); err != nil {
		return 0, 0, err
	}
	ids, err := b.members(g)
	if err != nil {
		return 0, 0, err
	}
	exp := seconds(b.opts.GroupExpiry)
	marker, _ := b.item(b.groupKey(g, "done:"+id), []byte("1"), b.opts.GroupExpiry)
	var done uint64
	switch err := b.mc.Add(marker); {
	case err == nil:
		if done, err = b.mc.Increment(b.groupKey(g, "count"), 1); err != nil {
			b.mc.Delete(marker.Key) // so a redelivery counts it again
			if errors.Is(err, memcache.ErrCacheMiss) {
				return 0, 0, fmt.Errorf("memcache backend: group %s counter: %w", g, driver.ErrGroupNotFound)
			}
			return 0, 0, b.err(err)
		}
	case errors.Is(err, memcache.ErrNotStored): // counted before: a redelivery
		it, err := b.mc.Get(b.groupKey(g, "count"))
		if errors.Is(err, memcache.ErrCacheMiss) {
			return 0, 0, fmt.Errorf("memcache backend: group %s counter: %w", g, driver.ErrGroupNotFound)
		}
		if err != nil {
			return 0, 0, b.err(err)
		}
		fmt.Sscan(strings.TrimSpace(string(it.Value)), &done)
	default:
		return 0, 0, b.err(err)
	}
	for _, part := range []string{"members", "count", "claim"} {
		b.mc.Touch(b.groupKey(g, part), exp) // a missing claim is fine
	}
	return int(done), len(ids), nil
}

// ClaimChord adds the claim item; the claimer stored in it wins.
func (b *Backend) ClaimChord(ctx context.Context, g, claimer string) (bool, error) {
	if err := b.check(ctx); err != nil {
		return false, err
	}
	if _, err := b.mc.Get(b.groupKey(g, "count")); errors.Is(err, memcache.ErrCacheMiss) {
		return false, fmt.Errorf("memcache backend: group %s: %w", g, driver.ErrGroupNotFound)
	} else if err != nil {
		return false, b.err(err)
	}
	claim, _ := b.item(b.groupKey(g, "claim"), []byte(claimer), b.opts.GroupExpiry)
	switch err := b.mc.Add(claim); {
	case err == nil:
		return true, nil
	case !errors.Is(err, memcache.ErrNotStored):
		return false, b.err(err)
	}
	it, err := b.mc.Get(claim.Key)
	if err != nil {
		return false, b.err(err)
	}
	return string(it.Value) == claimer, nil
}

// GroupStates reads the member list, then every state in one GetMulti.
func (b *Backend) GroupStates(ctx context.Context, g string) ([]*driver.TaskState, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	ids, err := b.members(g)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = b.taskKey(id)
	}
	items, err := b.mc.GetMulti(keys)
	if err != nil {
		return nil, b.err(err)
	}
	out := make([]*driver.TaskState, len(ids))
	for i, id := range ids {
		it, ok := items[keys[i]]
		if !ok {
			out[i] = &driver.TaskState{TaskUUID: id, State: driver.StatePending}
			continue
		}
		if out[i], err = decodeState(id, it.Value); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Close makes later calls return driver.ErrClosed; it closes the client only
// if Options.CloseClient.
func (b *Backend) Close() error {
	if b.closed.Swap(true) || !b.opts.CloseClient {
		return nil
	}
	return b.mc.Close()
}
