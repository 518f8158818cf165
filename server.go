package errand

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/errand-go/errand/internal/portable"
	"github.com/errand-go/errand/internal/uuid"
)

// DefaultQueue is the queue used when neither a signature's RoutingKey nor
// Config.DefaultQueue names one.
const DefaultQueue = "errand_tasks"

// Config configures a Server.
type Config struct {
	// Broker carries tasks to workers. Required.
	Broker Broker
	// Backend stores states and results. Required.
	Backend Backend
	// DefaultQueue is the routing key of signatures that name none.
	// Default: "errand_tasks".
	DefaultQueue string
	// PublishBatch is how many messages one Publish call carries when a
	// group or chord is sent, and how many concurrent SendTask calls to one
	// queue one call carries where the broker and the backend are
	// co-located (driver.Colocator). Default: 100.
	PublishBatch int
	// SendMiddleware wraps every send of this server (see SendMiddleware):
	// SendTask, SendGroup, SendChord, SendChain, and its workers' retries
	// and callbacks. SendMiddleware[0] is outermost. Default: none.
	SendMiddleware []SendMiddleware
	// Logger receives warnings and errors. Default: discards everything.
	Logger *slog.Logger
	// Signing, if set, signs every message this server publishes (under
	// Signing.SignWith) and makes its workers verify the signatures of the
	// messages they take (see [Signing]). Default: nil, messages unsigned
	// and signatures not checked.
	Signing *Signing
}

// Server registers tasks, sends tasks and workflows, and makes workers. It
// is safe for concurrent use.
type Server struct {
	cfg     Config
	broker  *portable.Broker  // cfg.Broker in the portable layer
	backend *portable.Backend // cfg.Backend in the portable layer
	log     *slog.Logger
	mu      sync.RWMutex
	tasks   map[string]*task

	// coloc is the server's co-location with its backend (driver.Colocator;
	// colocation.go); nil: the portable path.
	coloc *colocated
}

// NewServer returns a Server for cfg.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Broker == nil || cfg.Backend == nil {
		return nil, errors.New("errand: NewServer: Config.Broker and Config.Backend are required")
	}
	if cfg.DefaultQueue == "" {
		cfg.DefaultQueue = DefaultQueue
	}
	if cfg.PublishBatch <= 0 {
		cfg.PublishBatch = 100
	}
	if cfg.Signing != nil {
		if err := cfg.Signing.check(); err != nil {
			return nil, err
		}
		sg := *cfg.Signing // later changes to the caller's value do not apply
		sg.Keys = maps.Clone(sg.Keys)
		cfg.Signing = &sg
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{cfg: cfg, broker: portable.WrapBroker(cfg.Broker), backend: portable.WrapBackend(cfg.Backend), log: log, tasks: make(map[string]*task)}
	if c := s.broker.Can.Colocator; c != nil {
		if calls := c.Colocate(s.backend.Drv); calls != nil {
			s.coloc = &colocated{calls: calls}
			s.coloc.sends, s.coloc.settles = s.newFreshSender(), s.newColocatedSettler()
		}
	}
	return s, nil
}

// Broker returns the broker the server was configured with
// (Config.Broker), the very value passed in: a type assertion to the
// driver's own type works, e.g. to reach a driver's own methods. Calls on
// it go to the driver directly, without the checks the server adds. Close
// the server, not the driver: the server's own calls then answer ErrClosed
// without reaching the driver.
func (s *Server) Broker() Broker { return s.cfg.Broker }

// Backend returns the result backend the server was configured with
// (Config.Backend), the very value passed in, as Broker does for the
// broker.
func (s *Server) Backend() Backend { return s.cfg.Backend }

// Close closes the server's broker and backend; every later call on them,
// or on the server, returns an error satisfying errors.Is(err, ErrClosed).
// Shut workers down first, and let them finish: a Shutdown that returned a
// *ShutdownError leaves its late tasks settling in the background for up
// to WorkerConfig.SettleGrace, and a Close meanwhile makes their outcomes
// fail with ErrClosed (they run again after their leases). To keep them,
// call Shutdown again with a ctx of SettleGrace before Close:
//
//	if err := w.Shutdown(ctx); err != nil {
//		graceCtx, cancel := context.WithTimeout(context.Background(), errand.DefaultSettleGrace)
//		w.Shutdown(graceCtx) // waits for the late tasks to settle
//		cancel()
//	}
//	srv.Close()
func (s *Server) Close() error {
	if s.coloc != nil {
		s.coloc.settles.Close()
		s.coloc.sends.Close()
	}
	return errors.Join(s.broker.Close(), s.backend.Close())
}

// TaskOption tunes one registered task.
type TaskOption func(*task)

// WithRetryPolicy sets the retry policy of one task, overriding the
// worker's.
func WithRetryPolicy(p RetryPolicy) TaskOption { return func(t *task) { t.policy = p } }

// Register makes fn runnable by workers under name. fn takes an optional
// leading context.Context and any number of JSON-decodable parameters, and
// returns any number of JSON-encodable values followed by an error:
//
//	func(ctx context.Context, a, b int) (int, error)
//	func(urls []string) error
//	func(ctx context.Context, parts ...int) (int, error)  // e.g. a chord callback
//
// Anything else is refused here, with an error naming the task and the
// offending parameter or result. Registering a name again replaces it.
func (s *Server) Register(name string, fn any, opts ...TaskOption) error {
	t, err := newTask(name, fn)
	if err != nil {
		return err
	}
	for _, o := range opts {
		o(t)
	}
	if err := s.checkRateLimit(t); err != nil {
		return err
	}
	if err := s.checkConcurrencyLimit(t); err != nil {
		return err
	}
	s.mu.Lock()
	s.tasks[name] = t
	s.forgetStartable()
	s.mu.Unlock()
	return nil
}

// RegisterTasks registers every function of m under its key, or none of
// them: if any entry is refused, nothing is registered and the error names
// every refused entry, in name order.
func (s *Server) RegisterTasks(m map[string]any) error {
	names := slices.Sorted(maps.Keys(m))
	tasks := make([]*task, 0, len(m))
	var errs []error
	for _, name := range names {
		t, err := newTask(name, m[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		tasks = append(tasks, t)
	}
	if len(errs) > 0 {
		return fmt.Errorf("errand: RegisterTasks: nothing registered: %w", errors.Join(errs...))
	}
	s.mu.Lock()
	for _, t := range tasks {
		s.tasks[t.name] = t
		s.forgetStartable()
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) task(name string) *task {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tasks[name]
}

// prepare fills in what a signature about to be sent must have: a UUID and
// a queue for it and every signature linked to it, so that a redelivered
// parent republishes callbacks under the same IDs.
func (s *Server) prepare(sig *Signature) {
	if sig == nil {
		return
	}
	if sig.UUID == "" {
		sig.UUID = uuid.New()
	}
	sig.madeUUID = "" // sent: a state may exist under its UUID from now on
	if sig.RoutingKey == "" {
		sig.RoutingKey = s.cfg.DefaultQueue
	}
	if sig.Attempt < 1 {
		sig.Attempt = 1
	}
	for _, c := range sig.OnSuccess {
		s.prepare(c)
	}
	for _, c := range sig.OnError {
		s.prepare(c)
	}
	s.prepare(sig.ChordCallback)
}

// message encodes sig for the broker, signs it if Config.Signing says so,
// and checks the broker's payload limit.
func (s *Server) message(sig *Signature) (Message, error) {
	return s.messageSignedBy(sig, s.cfg.Signing)
}

// messageSignedBy is message with sg's signing instead of Config.Signing's
// (Requeue signs a verified message again under the key it was signed with).
func (s *Server) messageSignedBy(sig *Signature, sg *Signing) (Message, error) {
	if err := selfCallback(sig); err != nil {
		return Message{}, fmt.Errorf("errand: not sent: %w", err)
	}
	body, err := EncodeSignature(sig)
	if err != nil {
		return Message{}, err
	}
	body = sg.seal(body) // before the size check: the envelope counts
	m := Message{ID: sig.UUID, Queue: sig.RoutingKey, Body: body, Priority: sig.Priority, Task: sig.Name, TaskAttempt: sig.attempt()}
	if sig.ETA != nil {
		m.NotBefore = *sig.ETA
	}
	if err := s.broker.CheckPayload(m, sig.Name); err != nil {
		return Message{}, err
	}
	return m, nil
}

// publish sends already prepared signatures without touching their state
// (callbacks, retries).
func (s *Server) publish(ctx context.Context, sigs ...*Signature) error {
	if len(sigs) == 0 {
		return nil
	}
	return s.send(ctx, sigs, s.publishNow)
}

// publishNow encodes and publishes sigs (a SendHandler).
func (s *Server) publishNow(ctx context.Context, sigs []*Signature) error {
	msgs := make([]Message, 0, len(sigs))
	for _, sig := range sigs {
		m, err := s.message(sig)
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return nil
	}
	return s.broker.Publish(ctx, msgs...)
}

// setPending records sig PENDING: joined with concurrent callers' state
// writes, except inside a caller's transaction (tx.go), where it is a
// call of its own.
func (s *Server) setPending(ctx context.Context, sig *Signature) error {
	st := pendingState(sig, stateTime())
	if inTx(ctx) {
		return s.backend.SetAll(s.stateCtx(ctx), []*TaskState{st})
	}
	return s.backend.SetState(ctx, st)
}

func pendingState(sig *Signature, now time.Time) *TaskState {
	return &TaskState{TaskUUID: sig.UUID, TaskName: sig.Name, State: StatePending, Attempt: sig.attempt(), CreatedAt: now}
}

// setPendings records PENDING for sigs, in one call where the backend
// batches writes.
func (s *Server) setPendings(ctx context.Context, sigs []*Signature) error {
	sts := make([]*TaskState, len(sigs))
	now := stateTime()
	for i, sig := range sigs {
		sts[i] = pendingState(sig, now)
	}
	if err := s.backend.SetAll(s.stateCtx(ctx), sts); err != nil {
		return fmt.Errorf("set PENDING for %d tasks: %w", len(sigs), err)
	}
	return nil
}

// SendTask sends one task and returns a handle on its result. An oversized
// payload is refused before anything is written. With a UUID the caller
// chose, the task's state is PENDING before it reaches the broker. When
// errand made the UUID (sig.UUID empty, or the one NewSignature made and
// this is the signature's first send) and the backend can
// record PENDING only where a task has no state (driver.PendingWriter: the
// memory and Redis backends), the PENDING write and the publish go out
// together, one round trip instead of two: a worker that takes the task
// first records RECEIVED and the PENDING is dropped, and an error from the
// PENDING write is returned although the task was published. Where the
// broker and the backend are co-located (driver.Colocator: the Redis
// drivers on one Redis, the memory drivers) they go in one call, and
// concurrent SendTask calls to one queue join calls, many sends in one;
// a caller who gives up while its send is in such a call learns that
// call's outcome. Either way
// PENDING is recorded when SendTask returns without error, and a failed
// publish may leave it behind. Inside a caller's transaction ([WithTx])
// the send is a call of its own, made inside the transaction.
func (s *Server) SendTask(ctx context.Context, sig *Signature) (*AsyncResult, error) {
	if sig == nil || sig.Name == "" {
		return nil, errors.New("errand: SendTask: signature without a task name")
	}
	if err := checkUnique("SendTask", sig); err != nil {
		return nil, err
	}
	if err := s.checkTx(ctx, "SendTask"); err != nil {
		return nil, err
	}
	fresh := sig.UUID == "" || sig.UUID == sig.madeUUID
	s.prepare(sig)
	err := s.send(ctx, []*Signature{sig}, func(ctx context.Context, sigs []*Signature) error {
		if err := s.checkTx(ctx, "SendTask"); err != nil { // send middleware may change ctx
			return err
		}
		m, err := s.message(sigs[0])
		if err != nil {
			return err
		}
		unlock, err := s.lockUnique(ctx, sigs[0])
		if err != nil {
			return err
		}
		// A UUID send middleware changed is not the one made here.
		published, err := s.setPendingAndPublish(ctx, sigs[0], m, fresh && sigs[0].UUID == sig.UUID)
		if err != nil && !published {
			unlock()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return s.handle(sig), nil
}

func (s *Server) handle(sig *Signature) *AsyncResult {
	return &AsyncResult{Signature: sig, backend: s.backend, srv: s}
}

// sendMany sets every signature PENDING and publishes them in batches of
// Config.PublishBatch, with up to concurrency batches in flight (< 1: one;
// always one inside a caller's transaction, which runs one call at a
// time). Every payload is checked before anything is sent.
func (s *Server) sendMany(ctx context.Context, sigs []*Signature, concurrency int) error {
	if inTx(ctx) {
		concurrency = 1
	}
	msgs := make([]Message, len(sigs))
	for i, sig := range sigs {
		m, err := s.message(sig)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	concurrency = max(concurrency, 1)
	batch := s.cfg.PublishBatch
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for lo := 0; lo < len(sigs); lo += batch {
		hi := min(lo+batch, len(sigs))
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.setPendings(ctx, sigs[lo:hi]); err != nil {
				cancel(err)
				return
			}
			if err := s.broker.Publish(ctx, msgs[lo:hi]...); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("errand: send: %w", err)
	}
	return nil
}

// SendOption tunes one SendGroup or SendChord call.
type SendOption func(*sendOptions)

type sendOptions struct {
	concurrency int  // publish batches in flight; < 1: one
	record      bool // SendGroup records the group's members (RecordGroup)
}

// SendConcurrency lets one SendGroup or SendChord call have up to n
// publish batches (of Config.PublishBatch messages) in flight at once.
// Default: 1, one batch after another; n below 1 means 1. Inside a
// caller's transaction ([WithTx]) it is ignored: one batch after another.
func SendConcurrency(n int) SendOption { return func(o *sendOptions) { o.concurrency = n } }

// RecordGroup makes SendGroup record the group's members in the backend
// (Backend.InitGroup, one write, before any member is sent, inside the
// caller's transaction where the backend takes it, as SendChord records
// its group), so that [Server.Cancel] with the group's UUID cancels every
// member, from any process. Without it a plain group keeps no member list
// (nothing else reads one) and its UUID is unknown to Cancel. The record
// lives as the backend keeps a chord's group: GroupExpiry (24h by default,
// never less than the result expiry) on the errand formats. SendChord
// ignores it: a chord's group is always recorded.
func RecordGroup() SendOption { return func(o *sendOptions) { o.record = true } }

func sendOpts(opts []SendOption) sendOptions {
	var o sendOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// SendGroup sends every task of g and returns their results in group
// order. Options: [SendConcurrency], and [RecordGroup] to make the
// group's UUID cancellable ([Server.Cancel]); by default a plain group
// writes no group record, only its tasks' states.
func (s *Server) SendGroup(ctx context.Context, g *Group, opts ...SendOption) ([]*AsyncResult, error) {
	if g == nil || len(g.Tasks) == 0 {
		return nil, errors.New("errand: empty group")
	}
	if err := checkUnique("SendGroup", nil, g.Tasks...); err != nil {
		return nil, err
	}
	if err := s.checkTx(ctx, "SendGroup"); err != nil {
		return nil, err
	}
	o := sendOpts(opts)
	if o.record {
		if err := s.initGroup(ctx, g); err != nil {
			return nil, err
		}
	} else {
		for _, sig := range g.Tasks {
			s.prepare(sig)
		}
	}
	return s.sendGroup(ctx, g, o.concurrency)
}

// sendGroup sends g's prepared tasks. A plain group writes no group
// metadata (unless RecordGroup, through initGroup): a chord's callback and
// a cancel by the group's UUID read it.
func (s *Server) sendGroup(ctx context.Context, g *Group, sendConcurrency int) ([]*AsyncResult, error) {
	err := s.send(ctx, g.Tasks, func(ctx context.Context, sigs []*Signature) error {
		if err := s.checkTx(ctx, "send group"); err != nil {
			return err
		}
		return s.sendMany(ctx, sigs, sendConcurrency)
	})
	if err != nil {
		return nil, err
	}
	out := make([]*AsyncResult, len(g.Tasks))
	for i, sig := range g.Tasks {
		out[i] = s.handle(sig)
	}
	return out, nil
}

// initGroup prepares g's tasks and records its members, for its chord or
// for a cancel by its UUID (RecordGroup).
func (s *Server) initGroup(ctx context.Context, g *Group) error {
	if g == nil || len(g.Tasks) == 0 {
		return errors.New("errand: empty group")
	}
	if g.GroupUUID == "" {
		return errors.New("errand: group without a GroupUUID: nothing to record its members under (make it with NewGroup)")
	}
	ids := make([]string, len(g.Tasks))
	for i, sig := range g.Tasks {
		s.prepare(sig)
		ids[i] = sig.UUID
	}
	if err := s.backend.InitGroup(s.stateCtx(ctx), g.GroupUUID, ids); err != nil {
		return fmt.Errorf("errand: init group %s: %w", g.GroupUUID, err)
	}
	return nil
}

// SendChord sends the chord's group; its callback runs once every member
// has succeeded, with their results as arguments in group order (see
// [Chord]). The callback is PENDING from the start. Options:
// [SendConcurrency].
func (s *Server) SendChord(ctx context.Context, c *Chord, opts ...SendOption) (*ChordAsyncResult, error) {
	if c == nil || c.Callback == nil || c.Group == nil {
		return nil, errors.New("errand: chord without a group or a callback")
	}
	if err := checkUnique("SendChord", nil, append([]*Signature{c.Callback}, c.Group.Tasks...)...); err != nil {
		return nil, err
	}
	if err := s.checkTx(ctx, "SendChord"); err != nil {
		return nil, err
	}
	s.prepare(c.Callback)
	for _, sig := range c.Group.Tasks {
		sig.ChordCallback = c.Callback
	}
	if err := s.initGroup(ctx, c.Group); err != nil {
		return nil, err
	}
	if err := s.setPending(ctx, c.Callback); err != nil {
		return nil, fmt.Errorf("errand: send chord: set callback PENDING: %w", err)
	}
	rs, err := s.sendGroup(ctx, c.Group, sendOpts(opts).concurrency)
	if err != nil {
		return nil, err
	}
	return &ChordAsyncResult{Group: rs, Callback: s.handle(c.Callback)}, nil
}

// SendChain sends the first task of the chain; each next one is sent by the
// worker when its predecessor succeeds (see [Chain]). Every task of the
// chain is PENDING from the start.
func (s *Server) SendChain(ctx context.Context, c *Chain) (*ChainAsyncResult, error) {
	if c == nil || len(c.Tasks) == 0 {
		return nil, errors.New("errand: empty chain")
	}
	if err := checkUnique("SendChain", c.Tasks[0], c.Tasks[1:]...); err != nil {
		return nil, err
	}
	if err := s.checkTx(ctx, "SendChain"); err != nil {
		return nil, err
	}
	s.prepare(c.Tasks[0])
	err := s.send(ctx, c.Tasks[:1], func(ctx context.Context, first []*Signature) error {
		if err := s.checkTx(ctx, "SendChain"); err != nil {
			return err
		}
		m, err := s.message(first[0])
		if err != nil {
			return err
		}
		unlock, err := s.lockUnique(ctx, first[0])
		if err != nil {
			return err
		}
		for _, sig := range c.Tasks {
			if err := s.setPending(ctx, sig); err != nil {
				unlock()
				return fmt.Errorf("errand: send chain: set PENDING: %w", err)
			}
		}
		if err := s.broker.Publish(ctx, m); err != nil {
			unlock()
			return fmt.Errorf("errand: send chain: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := &ChainAsyncResult{}
	for _, sig := range c.Tasks {
		res.Results = append(res.Results, s.handle(sig))
	}
	return res, nil
}
