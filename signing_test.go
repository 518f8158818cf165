package errand_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
	memorybackend "github.com/errand-go/errand/backends/memory"
	memorybroker "github.com/errand-go/errand/brokers/memory"
)

var (
	key1 = []byte("0123456789abcdef0123456789abcdef")
	key2 = []byte("fedcba9876543210fedcba9876543210")
)

// signServer is one application sharing a memory broker and backend with
// others: a producer or a worker with its own Signing.
func signServer(t *testing.T, br *memorybroker.Broker, be errand.Backend, sg *errand.Signing) *errand.Server {
	t.Helper()
	srv, err := errand.NewServer(errand.Config{Broker: br, Backend: be, Signing: sg})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// sealWith builds a signed body by hand, following the documented envelope.
func sealWith(id string, key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("errand-sig:v1:" + id + ":"))
	h.Write(body)
	return append([]byte("errand-sig:v1:"+id+":"+base64.RawURLEncoding.EncodeToString(h.Sum(nil))+"\n"), body...)
}

func startWorker(t *testing.T, srv *errand.Server) {
	t.Helper()
	w := srv.NewWorker(errand.WorkerConfig{Concurrency: 2, ErrorBackoff: 10 * time.Millisecond, RetryPolicy: errand.Fixed(0)})
	w.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("worker shutdown: %v", err)
		}
	})
}

// waitDeadLetter polls the archive of the default queue for id, with a
// reason containing want, until ctx ends.
func waitDeadLetter(t *testing.T, ctx context.Context, br *memorybroker.Broker, id, want string) {
	t.Helper()
	for {
		dl, err := setAside(ctx, br, errand.DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range dl {
			if m.ID == id {
				if reason := m.Reason + ": " + m.Error; !strings.Contains(reason, want) {
					t.Errorf("signing promise broken: message %s set aside with reason %q, want it to contain %q", id, reason, want)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("signing promise broken: message %s was never set aside (archive: %+v)", id, dl)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestSignedMessagesRunAndForgedNever (issue 14, signed messages): a worker
// requiring signatures runs tasks, chains and retries signed by a producer
// sharing its key, and sets aside — never running — a message altered
// after signing, one signed with another secret, one under an unknown key
// id, a garbled header, and an unsigned one.
func TestSignedMessagesRunAndForgedNever(t *testing.T) {
	t.Parallel()
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	ctx := ctxT(t)
	var runs atomic.Int64
	worker := signServer(t, br, be, &errand.Signing{Keys: map[string][]byte{"k1": key1}, SignWith: "k1", Require: true})
	var flaky atomic.Int64
	if err := worker.Register("add", func(a, b int) (int, error) { runs.Add(1); return a + b, nil }); err != nil {
		t.Fatal(err)
	}
	if err := worker.Register("flaky", func() (string, error) {
		if flaky.Add(1) == 1 {
			return "", errors.New("first attempt fails")
		}
		return "ok", nil
	}); err != nil {
		t.Fatal(err)
	}
	startWorker(t, worker)
	producer := signServer(t, br, be, &errand.Signing{Keys: map[string][]byte{"k1": key1}, SignWith: "k1"})

	// Signed by the producer: a task, a chain (the worker signs the next
	// message) and a retry (the worker signs it too).
	var n int
	r, err := producer.SendTask(ctx, errand.NewSignature("add", 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.GetInto(ctx, &n); err != nil || n != 5 {
		t.Fatalf("signing promise broken: a signed task under Require gave %d, %v; want 5", n, err)
	}
	ch, err := errand.NewChain(errand.NewSignature("add", 1, 1), errand.NewSignature("add", 10))
	if err != nil {
		t.Fatal(err)
	}
	chain, err := producer.SendChain(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := chain.GetInto(ctx, &n); err != nil || n != 12 {
		t.Fatalf("signing promise broken: a signed chain under Require gave %d, %v; want 12 (the worker signs the callbacks it sends)", n, err)
	}
	retry := errand.NewSignature("flaky")
	retry.RetryCount = 1
	var s string
	if r, err = producer.SendTask(ctx, retry); err != nil {
		t.Fatal(err)
	}
	if err := r.GetInto(ctx, &s); err != nil || s != "ok" {
		t.Fatalf("signing promise broken: a retried task under Require gave %q, %v; want ok (the worker signs the retries it sends)", s, err)
	}

	before := runs.Load()
	body := func(a, b int) (string, []byte) {
		sig := errand.NewSignature("add", a, b)
		sig.RoutingKey = errand.DefaultQueue
		b2, err := errand.EncodeSignature(sig)
		if err != nil {
			t.Fatal(err)
		}
		return sig.UUID, b2
	}
	type forged struct {
		what, want string
		id         string
		raw        []byte
	}
	var cases []forged
	{
		id, b := body(1, 2)
		signed := sealWith("k1", key1, b)
		altered := []byte(strings.Replace(string(signed), `"value":2`, `"value":3`, 1))
		if string(altered) == string(signed) {
			t.Fatal("test bug: alteration changed nothing")
		}
		cases = append(cases, forged{"altered after signing", "does not verify", id, altered})
	}
	{
		id, b := body(1, 2)
		cases = append(cases, forged{"signed with another secret under k1", "does not verify", id, sealWith("k1", key2, b)})
	}
	{
		id, b := body(1, 2)
		cases = append(cases, forged{"signed under an unknown key id", `key "k9"`, id, sealWith("k9", key1, b)})
	}
	{
		id, b := body(1, 2)
		cases = append(cases, forged{"garbled header", "malformed", id, append([]byte("errand-sig:v1:k1:!!!\n"), b...)})
	}
	{
		id, b := body(1, 2)
		cases = append(cases, forged{"unsigned", "not signed", id, b})
	}
	for _, c := range cases {
		if err := br.Publish(ctx, errand.Message{ID: c.id, Queue: errand.DefaultQueue, Body: c.raw}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		waitDeadLetter(t, ctx, br, c.id, c.want)
		waitDeadLetter(t, ctx, br, c.id, errand.ErrBadSignature.Error())
		if _, err := be.GetState(ctx, c.id); !errors.Is(err, errand.ErrTaskNotFound) {
			t.Errorf("signing promise broken: a message %s left a state (%v); it must be set aside before anything is recorded", c.what, err)
		}
	}
	if got := runs.Load(); got != before {
		t.Errorf("signing promise broken: %d forged or unsigned messages ran; none may", got-before)
	}
}

// TestSigningKeyRotation: a worker holding old and new keys runs messages
// signed with either; once the old key is removed, messages signed with it
// are set aside.
func TestSigningKeyRotation(t *testing.T) {
	t.Parallel()
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	ctx := ctxT(t)
	worker := signServer(t, br, be, &errand.Signing{Keys: map[string][]byte{"2026-01": key1, "2026-02": key2}, Require: true})
	if err := worker.Register("add", func(a, b int) (int, error) { return a + b, nil }); err != nil {
		t.Fatal(err)
	}
	startWorker(t, worker)
	old := signServer(t, br, be, &errand.Signing{Keys: map[string][]byte{"2026-01": key1}, SignWith: "2026-01"})
	cur := signServer(t, br, be, &errand.Signing{Keys: map[string][]byte{"2026-02": key2}, SignWith: "2026-02"})
	for i, p := range []*errand.Server{old, cur} {
		r, err := p.SendTask(ctx, errand.NewSignature("add", i, 1))
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := r.GetInto(ctx, &n); err != nil || n != i+1 {
			t.Fatalf("key rotation promise broken: a message signed with key %d of 2 gave %d, %v; want %d (both keys are configured on the worker)", i+1, n, err, i+1)
		}
	}

	// The old key retired on a second worker (its own queue).
	br2 := memorybroker.New(nil)
	t.Cleanup(func() { br2.Close() })
	retired := signServer(t, br2, be, &errand.Signing{Keys: map[string][]byte{"2026-02": key2}, Require: true})
	if err := retired.Register("add", func(a, b int) (int, error) { return a + b, nil }); err != nil {
		t.Fatal(err)
	}
	startWorker(t, retired)
	oldOn2 := signServer(t, br2, be, &errand.Signing{Keys: map[string][]byte{"2026-01": key1}, SignWith: "2026-01"})
	r, err := oldOn2.SendTask(ctx, errand.NewSignature("add", 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	waitDeadLetter(t, ctx, br2, r.Signature.UUID, `key "2026-01"`)
}

// TestSigningWithoutRequire: a worker with keys but without Require runs
// unsigned messages and messages under keys it lacks, and still sets aside
// a message whose MAC does not verify under a key it has.
func TestSigningWithoutRequire(t *testing.T) {
	t.Parallel()
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	ctx := ctxT(t)
	var runs atomic.Int64
	worker := signServer(t, br, be, &errand.Signing{Keys: map[string][]byte{"k1": key1}})
	if err := worker.Register("add", func(a, b int) (int, error) { runs.Add(1); return a + b, nil }); err != nil {
		t.Fatal(err)
	}
	startWorker(t, worker)
	for i, p := range []*errand.Server{
		signServer(t, br, be, nil),
		signServer(t, br, be, &errand.Signing{Keys: map[string][]byte{"k1": key1}, SignWith: "k1"}),
		signServer(t, br, be, &errand.Signing{Keys: map[string][]byte{"other": key2}, SignWith: "other"}),
	} {
		r, err := p.SendTask(ctx, errand.NewSignature("add", 1, 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Get(ctx); err != nil {
			t.Fatalf("signing promise broken: without Require, message %d of 3 (unsigned, signed with the worker's key, signed with a key it lacks) did not run: %v", i+1, err)
		}
	}
	before := runs.Load()
	sig := errand.NewSignature("add", 1, 1)
	sig.RoutingKey = errand.DefaultQueue
	b, _ := errand.EncodeSignature(sig)
	if err := br.Publish(ctx, errand.Message{ID: sig.UUID, Queue: errand.DefaultQueue, Body: sealWith("k1", key2, b)}); err != nil {
		t.Fatal(err)
	}
	waitDeadLetter(t, ctx, br, sig.UUID, "does not verify")
	if runs.Load() != before {
		t.Errorf("signing promise broken: a forged message under a known key ran without Require; it must be set aside")
	}
}

// TestSigningEnvelopeCountsTowardPayloadLimit: a message that fits the
// broker unsigned but not with its signature header is refused with
// ErrPayloadTooLarge before anything is sent.
func TestSigningEnvelopeCountsTowardPayloadLimit(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	sig := errand.NewSignature("echo", strings.Repeat("x", 200))
	sig.RoutingKey = errand.DefaultQueue
	sig.Attempt = 1
	plain, _ := errand.EncodeSignature(sig)
	br, be := memorybroker.New(&memorybroker.Options{MaxPayload: len(plain) + 10}), memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	if _, err := signServer(t, br, be, nil).SendTask(ctx, sig.Copy()); err != nil {
		t.Fatalf("test setup: the unsigned message must fit: %v", err)
	}
	signed := signServer(t, br, be, &errand.Signing{Keys: map[string][]byte{"k1": key1}, SignWith: "k1"})
	if _, err := signed.SendTask(ctx, sig.Copy()); !errors.Is(err, errand.ErrPayloadTooLarge) {
		t.Fatalf("payload limit promise broken: a signed message over the limit only with its header was sent (%v); want ErrPayloadTooLarge", err)
	}
}

// TestSigningConfigChecked: NewServer refuses a Signing it cannot use.
func TestSigningConfigChecked(t *testing.T) {
	t.Parallel()
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	for _, sg := range []*errand.Signing{
		{},
		{Keys: map[string][]byte{"k1": key1}, SignWith: "k2"},
		{Keys: map[string][]byte{"k1": []byte("short")}},
		{Keys: map[string][]byte{"bad:id": key1}},
	} {
		if _, err := errand.NewServer(errand.Config{Broker: br, Backend: be, Signing: sg}); err == nil {
			t.Errorf("signing config promise broken: NewServer accepted %+v", sg)
		}
	}
}

// TestSignedMessagesListedWithTheirCheck (issue 24, item 6): the
// operator's view (Server.List, Server.Task) decodes a signed message and
// says what the server's keys make of its signature: verified under the
// right key; a MAC that does not verify, or a malformed header, reported
// with the worker's reason and still decoded; a key the server lacks, or
// no keys at all, signed but unverified; under Require an unsigned message
// reported as a worker would set it aside.
func TestSignedMessagesListedWithTheirCheck(t *testing.T) {
	t.Parallel()
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	ctx := ctxT(t)
	const queue = "signed_list"
	type message struct{ what, id string }
	var msgs []message
	publish := func(what string, seal func([]byte) []byte) {
		sig := errand.NewSignature("add", 2, 3)
		sig.RoutingKey = queue
		b, err := errand.EncodeSignature(sig)
		if err != nil {
			t.Fatal(err)
		}
		if err := br.Publish(ctx, errand.Message{ID: sig.UUID, Queue: queue, Body: seal(b)}); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, message{what, sig.UUID})
	}
	publish("good", func(b []byte) []byte { return sealWith("k1", key1, b) })
	publish("forged", func(b []byte) []byte { return sealWith("k1", key2, b) })
	publish("unknown key", func(b []byte) []byte { return sealWith("k9", key1, b) })
	publish("garbled", func(b []byte) []byte { return append([]byte("errand-sig:v1:k1:!!!\n"), b...) })
	publish("unsigned", func(b []byte) []byte { return b })

	type want struct {
		key      string
		verified bool
		err      string // "" none; else a part of SignatureError
	}
	for _, v := range []struct {
		name string
		sg   *errand.Signing
		want map[string]want
	}{
		{"the right key", &errand.Signing{Keys: map[string][]byte{"k1": key1}}, map[string]want{
			"good": {"k1", true, ""}, "forged": {"k1", false, "does not verify"}, "unknown key": {"k9", false, ""},
			"garbled": {"k1", false, "malformed"}, "unsigned": {"", false, ""},
		}},
		{"a wrong key", &errand.Signing{Keys: map[string][]byte{"k1": key2}}, map[string]want{
			"good": {"k1", false, "does not verify"}, "forged": {"k1", true, ""}, "unknown key": {"k9", false, ""},
			"garbled": {"k1", false, "malformed"}, "unsigned": {"", false, ""},
		}},
		{"no keys", nil, map[string]want{
			"good": {"k1", false, ""}, "forged": {"k1", false, ""}, "unknown key": {"k9", false, ""},
			"garbled": {"k1", false, "malformed"}, "unsigned": {"", false, ""},
		}},
		{"Require", &errand.Signing{Keys: map[string][]byte{"k1": key1}, Require: true}, map[string]want{
			"good": {"k1", true, ""}, "forged": {"k1", false, "does not verify"}, "unknown key": {"k9", false, `key "k9"`},
			"garbled": {"k1", false, "malformed"}, "unsigned": {"", false, "not signed"},
		}},
	} {
		srv := signServer(t, br, be, v.sg)
		ts, err := srv.List(ctx, queue, errand.ListPending, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]errand.QueuedTask{}
		for _, ti := range ts {
			listed[ti.ID] = ti
		}
		for _, m := range msgs {
			one, err := srv.Task(ctx, queue, m.id)
			if err != nil {
				t.Fatalf("Task %s (%s): %v", m.id, m.what, err)
			}
			for how, ti := range map[string]errand.QueuedTask{"List": listed[m.id], "Task": one} {
				w := v.want[m.what]
				if ti.ID != m.id {
					t.Errorf("operator view promise broken: %s with %s does not hold the %s message", how, v.name, m.what)
					continue
				}
				if ti.Signature == nil || ti.Signature.Name != "add" || ti.DecodeError != "" {
					t.Errorf("operator view promise broken: %s with %s: the %s message should decode (add), got %+v, decode error %q", how, v.name, m.what, ti.Signature, ti.DecodeError)
				}
				if ti.SigningKey != w.key || ti.Verified != w.verified {
					t.Errorf("operator view promise broken: %s with %s: the %s message shows key %q, verified %v; want %q, %v", how, v.name, m.what, ti.SigningKey, ti.Verified, w.key, w.verified)
				}
				switch {
				case w.err == "" && ti.SignatureError != "":
					t.Errorf("operator view promise broken: %s with %s: the %s message shows signature error %q; a worker with these keys runs it", how, v.name, m.what, ti.SignatureError)
				case w.err != "" && (!strings.Contains(ti.SignatureError, w.err) || !strings.Contains(ti.SignatureError, errand.ErrBadSignature.Error())):
					t.Errorf("operator view promise broken: %s with %s: the %s message shows signature error %q; want the worker's reason, containing %q", how, v.name, m.what, ti.SignatureError, w.err)
				}
			}
		}
	}
}

// TestRequeueSignedArchivedTask (issue 24, item 6): a requeue signs again
// what verified (under the key it was signed with when the server signs
// nothing), and never signs what the server could not verify: a message
// signed under a key it lacks, and one whose MAC does not verify, stay in
// the archive with an error wrapping ErrBadSignature. RequeueAll requeues
// the rest and says how many stayed.
func TestRequeueSignedArchivedTask(t *testing.T) {
	t.Parallel()
	br, be := memorybroker.New(nil), memorybackend.New(nil)
	t.Cleanup(func() { br.Close(); be.Close() })
	ctx := ctxT(t)
	keys := map[string][]byte{"k1": key1}
	worker := signServer(t, br, be, &errand.Signing{Keys: keys, Require: true})
	var fixed atomic.Bool
	if err := worker.Register("flaky", func() (string, error) {
		if !fixed.Load() {
			return "", errand.Permanent(errors.New("the service is down"))
		}
		return "fine now", nil
	}); err != nil {
		t.Fatal(err)
	}
	startWorker(t, worker)
	producer := signServer(t, br, be, &errand.Signing{Keys: keys, SignWith: "k1"})
	archived := func(id string) {
		t.Helper()
		waitFor(t, "task "+id+" archived", func() bool {
			_, err := worker.ArchivedTask(ctx, errand.DefaultQueue, id)
			return err == nil
		})
	}
	var good []string
	for range 2 {
		r, err := producer.SendTask(ctx, errand.NewSignature("flaky"))
		if err != nil {
			t.Fatal(err)
		}
		good = append(good, r.Signature.UUID)
		archived(r.Signature.UUID)
	}
	forged := errand.NewSignature("flaky")
	forged.RoutingKey = errand.DefaultQueue
	b, _ := errand.EncodeSignature(forged)
	if err := br.Publish(ctx, errand.Message{ID: forged.UUID, Queue: errand.DefaultQueue, Body: sealWith("k1", key2, b)}); err != nil {
		t.Fatal(err)
	}
	archived(forged.UUID)
	fixed.Store(true)

	// Without keys: nothing to sign it again with, so it stays.
	blind := signServer(t, br, be, nil)
	if err := blind.Requeue(ctx, errand.DefaultQueue, good[0]); !errors.Is(err, errand.ErrBadSignature) || !strings.Contains(err.Error(), `key "k1"`) {
		t.Errorf("requeue promise broken: a server without keys requeued a signed task (%v); want an error wrapping ErrBadSignature naming key k1", err)
	}
	if _, err := blind.ArchivedTask(ctx, errand.DefaultQueue, good[0]); err != nil {
		t.Errorf("requeue promise broken: a refused requeue took the task out of the archive: %v", err)
	}

	// Keys without SignWith (a dashboard's server): the forged one is
	// refused, the good one signed again under k1 (the Require worker runs it).
	operator := signServer(t, br, be, &errand.Signing{Keys: keys})
	if err := operator.Requeue(ctx, errand.DefaultQueue, forged.UUID); !errors.Is(err, errand.ErrBadSignature) || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("requeue promise broken: a message whose MAC does not verify was requeued (%v); want ErrBadSignature, 'does not verify'", err)
	}
	if err := operator.Requeue(ctx, errand.DefaultQueue, good[0]); err != nil {
		t.Fatalf("requeue of a verified task: %v", err)
	}
	var s string
	if err := operator.Result(good[0]).GetInto(ctx, &s); err != nil || s != "fine now" {
		t.Fatalf("requeue promise broken: a verified task requeued by a server without SignWith gave %q, %v; want \"fine now\" (signed again under k1, run by the Require worker)", s, err)
	}

	n, err := operator.RequeueAll(ctx, errand.DefaultQueue, "")
	if n != 1 || !errors.Is(err, errand.ErrBadSignature) || !strings.Contains(err.Error(), "1 archived tasks left") {
		t.Errorf("requeue promise broken: RequeueAll over one good and one forged task gave %d, %v; want 1 and an error wrapping ErrBadSignature saying 1 stayed", n, err)
	}
	if err := operator.Result(good[1]).GetInto(ctx, &s); err != nil || s != "fine now" {
		t.Errorf("requeue promise broken: the good task of RequeueAll gave %q, %v; want \"fine now\"", s, err)
	}
	if _, err := operator.ArchivedTask(ctx, errand.DefaultQueue, forged.UUID); err != nil {
		t.Errorf("requeue promise broken: the forged task left the archive: %v", err)
	}

	// An unsigned message (anyone who can write to the broker) set aside by
	// the Require worker: a server that signs (SignWith) requeues it
	// unsigned, as it came, so the Require worker sets it aside again
	// instead of running a message nobody verified.
	unsigned := errand.NewSignature("flaky")
	unsigned.RoutingKey = errand.DefaultQueue
	b, _ = errand.EncodeSignature(unsigned)
	if err := br.Publish(ctx, errand.Message{ID: unsigned.UUID, Queue: errand.DefaultQueue, Body: b}); err != nil {
		t.Fatal(err)
	}
	archived(unsigned.UUID)
	if err := producer.Requeue(ctx, errand.DefaultQueue, unsigned.UUID); err != nil {
		t.Fatalf("requeue of an unsigned archived task: %v", err)
	}
	waitFor(t, "the unsigned task set aside again", func() bool {
		ti, err := worker.ArchivedTask(ctx, errand.DefaultQueue, unsigned.UUID)
		return err == nil && ti.Archive != nil && ti.Archive.Attempts >= 1
	})
	if st, err := producer.Result(unsigned.UUID).State(ctx); err == nil && st.State == errand.StateSuccess {
		t.Fatalf("requeue promise broken: an unsigned message requeued by a signing server ran on a Require worker (%v): the requeue signed what nobody verified", st.State)
	}
}
