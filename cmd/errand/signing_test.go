package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/errand-go/errand"
)

// Signed messages (issue 24, item 6): the command takes signing keys from
// --signing-keys-file or ERRAND_SIGNING_KEYS, shows signed messages decoded
// and marked with what the keys make of them, signs what it sends, and
// never prints a key.

var (
	testKey  = []byte("0123456789abcdef0123456789abcdef")
	wrongKey = []byte("fedcba9876543210fedcba9876543210")
	testB64  = base64.StdEncoding.EncodeToString(testKey)
	wrongHex = hex.EncodeToString(wrongKey)
)

// signer returns a server over d's broker and backend whose Signing holds
// key under id k1 (signing with it; Require as asked). It is not closed:
// the drivers are d's.
func (d *deployment) signer(key []byte, require bool) *errand.Server {
	d.t.Helper()
	srv, err := errand.NewServer(errand.Config{Broker: d.srv.Broker(), Backend: d.srv.Backend(),
		Signing: &errand.Signing{Keys: map[string][]byte{"k1": key}, SignWith: "k1", Require: require}})
	if err != nil {
		d.t.Fatal(err)
	}
	return srv
}

// sendSigned sends add(a, b) to d's queue through srv and returns its ID.
func (d *deployment) sendSigned(srv *errand.Server, a, b int) string {
	d.t.Helper()
	sig := errand.NewSignature("add", a, b)
	sig.RoutingKey = d.queue
	if _, err := srv.SendTask(context.Background(), sig); err != nil {
		d.t.Fatal(err)
	}
	return sig.UUID
}

// field returns the rest of the line of `errand show` output that starts
// with key, or "" when there is none.
func field(out, key string) string {
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, key+" "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// noKeyMaterial fails the test when any output holds a secret.
func noKeyMaterial(t *testing.T, what string, outs ...result) {
	t.Helper()
	for _, r := range outs {
		for _, secret := range []string{testB64, strings.TrimRight(testB64, "="), wrongHex, string(testKey), string(wrongKey)} {
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("secrets promise broken: %s printed a signing key:\n%s", what, r)
			}
		}
	}
}

func TestSignedMessages(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		good := d.sendSigned(d.signer(testKey, false), 2, 3)
		forged := d.sendSigned(d.signer(wrongKey, false), 4, 5) // k1 with another secret
		plain := d.send("add", 0, 6, 7)
		var outs []result
		show := func(id string, args ...string) result {
			t.Helper()
			r := d.ok(append([]string{"show", id, "-q", d.queue}, args...)...)
			outs = append(outs, r)
			if !strings.HasPrefix(field(r.stdout, "name"), "add") || field(r.stdout, "undecodable") != "" {
				t.Errorf("show %s: a signed add should decode, whatever its signature; got:\n%s", id, r)
			}
			return r
		}
		signature := func(r result) string { return field(r.stdout, "signature") }
		// The SIGNATURE column of ls: the last field of each task's row.
		marks := func(r result) map[string]string {
			m := map[string]string{}
			for _, id := range []string{good, forged, plain} {
				if f := row(r.stdout, id); len(f) > 0 {
					m[id] = f[len(f)-1]
				}
			}
			return m
		}

		// The right key, from the environment.
		d.env = map[string]string{"ERRAND_SIGNING_KEYS": "k1=" + testB64}
		if r := show(good); signature(r) != `verified (key "k1")` || field(r.stdout, "args") != "[2, 3]" {
			t.Errorf("show with the right key: want add [2, 3] and 'signature verified (key \"k1\")', got:\n%s", r)
		}
		if r := show(forged); !strings.HasPrefix(signature(r), `FAILED: MAC does not verify under key "k1"`) || !strings.Contains(signature(r), "sets it aside") {
			t.Errorf("show of a message signed with another secret: want 'signature FAILED: MAC does not verify under key \"k1\" ...', got:\n%s", r)
		}
		if r := show(plain); signature(r) != "" {
			t.Errorf("show of an unsigned message: want no signature line, got %q", signature(r))
		}
		r := d.ok("ls", "pending", "-q", d.queue)
		outs = append(outs, r)
		if h := row(r.stdout, "ID"); len(h) == 0 || h[len(h)-1] != "SIGNATURE" {
			t.Errorf("ls of signed tasks: want a SIGNATURE column, got:\n%s", r)
		}
		if m := marks(r); m[good] != "verified" || m[forged] != "FAILED" || m[plain] != "-" {
			t.Errorf("ls with the right key: want verified, FAILED, - got %v:\n%s", m, r)
		}
		if !strings.Contains(r.stderr, "1 tasks whose signature does not verify") {
			t.Errorf("ls: stderr should count the task whose signature fails, got:\n%s", r)
		}
		var tasks []taskJSON
		d.json(&tasks, "ls", "pending", "-q", d.queue)
		for _, tj := range tasks {
			s := tj.Signature
			switch tj.ID {
			case good:
				if s == nil || s.Key != "k1" || !s.Verified || s.Error != "" {
					t.Errorf("ls -o json: the good task's signature is %+v, want k1, verified", s)
				}
			case forged:
				if s == nil || s.Key != "k1" || s.Verified || !strings.Contains(s.Error, "does not verify") || tj.Name != "add" {
					t.Errorf("ls -o json: the forged task is %+v with signature %+v, want add, k1, not verified, the reason", tj, s)
				}
			case plain:
				if s != nil {
					t.Errorf("ls -o json: an unsigned task has signature %+v, want none", s)
				}
			}
		}

		// A wrong key, from a file, in hex: the roles swap.
		d.env = nil
		file := filepath.Join(t.TempDir(), "keys")
		if err := os.WriteFile(file, []byte("# the signing keys\nk1=hex:"+wrongHex+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := show(good, "--signing-keys-file", file); !strings.HasPrefix(signature(r), `FAILED: MAC does not verify under key "k1"`) {
			t.Errorf("show with a wrong key: want 'signature FAILED: MAC does not verify', got:\n%s", r)
		}
		if r := show(forged, "--signing-keys-file", file); signature(r) != `verified (key "k1")` {
			t.Errorf("show of the message signed with the file's key: want verified, got:\n%s", r)
		}
		// The flag wins over the environment.
		d.env = map[string]string{"ERRAND_SIGNING_KEYS": "k1=" + testB64}
		if r := show(forged, "--signing-keys-file", file); signature(r) != `verified (key "k1")` {
			t.Errorf("--signing-keys-file should win over ERRAND_SIGNING_KEYS, got:\n%s", r)
		}

		// No key: signed, not verified, and what to do about it.
		d.env = nil
		if r := show(good); !strings.HasPrefix(signature(r), `not verified: signed with key "k1"`) || !strings.Contains(signature(r), "ERRAND_SIGNING_KEYS") {
			t.Errorf("show without keys: want 'signature not verified: signed with key \"k1\"; give the signing keys ...', got:\n%s", r)
		}
		r = d.ok("ls", "pending", "-q", d.queue)
		outs = append(outs, r)
		if m := marks(r); m[good] != "unverified" || m[forged] != "unverified" || m[plain] != "-" {
			t.Errorf("ls without keys: want unverified, unverified, - got %v:\n%s", m, r)
		}
		if !strings.Contains(r.stderr, "2 signed tasks not verified") {
			t.Errorf("ls without keys: stderr should say 2 signed tasks were not verified, got:\n%s", r)
		}
		var one taskJSON
		d.json(&one, "show", good, "-q", d.queue)
		if s := one.Signature; s == nil || s.Key != "k1" || s.Verified || s.Error != "" || len(one.Args) != 2 {
			t.Errorf("show -o json without keys: want add(2, 3) signed with k1, not verified, no error; got %+v, signature %+v", one, s)
		}
		noKeyMaterial(t, "show and ls", outs...)
	})
}

// TestSignedEnqueueAndRequeue: with a key the command signs what it sends
// (a worker requiring signatures runs it) and requeues a signed archived
// task (signed again); without one, enqueue sends unsigned (set aside by
// that worker) and requeue refuses, saying how to give the keys.
func TestSignedEnqueueAndRequeue(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d *deployment) {
		srv := d.signer(testKey, true)
		var fixed atomic.Bool
		if err := srv.RegisterTasks(map[string]any{
			"add": func(a, b int) (int, error) { return a + b, nil },
			"flaky": func() (string, error) {
				if !fixed.Load() {
					return "", errand.Permanent(errors.New("the service is down"))
				}
				return "fine now", nil
			},
		}); err != nil {
			t.Fatal(err)
		}
		w := srv.NewWorker(errand.WorkerConfig{Queues: map[string]int{d.queue: 1}, Concurrency: 2, PausePoll: 20 * time.Millisecond})
		w.Start()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			w.Shutdown(ctx)
		})
		keys := map[string]string{"ERRAND_SIGNING_KEYS": "k1=" + testB64}

		d.env = keys
		signed := strings.TrimSpace(d.ok("enqueue", "add", "2", "3", "-q", d.queue).stdout)
		if st := d.state(signed, errand.StateSuccess); len(st.Results) != 1 || string(st.Results[0].Value) != "5" {
			t.Errorf("enqueue with a key: the Require worker should run add(2, 3) = 5, got %+v", st.Results)
		}
		d.env = nil
		unsigned := strings.TrimSpace(d.ok("enqueue", "add", "2", "3", "-q", d.queue).stdout)
		d.archived(unsigned)
		if r := d.ok("show", unsigned, "-q", d.queue); !strings.Contains(field(r.stdout, "reason")+field(r.stdout, "error"), "not signed") {
			t.Errorf("enqueue without a key sends unsigned: the Require worker should set it aside as not signed, got:\n%s", r)
		}

		d.env = keys
		flaky := strings.TrimSpace(d.ok("enqueue", "flaky", "-q", d.queue).stdout)
		d.archived(flaky)
		fixed.Store(true)
		d.env = nil
		d.fails(1, []string{`signed with key "k1"`, "no signing keys given", "ERRAND_SIGNING_KEYS"}, "requeue", flaky, "-q", d.queue)
		d.archived(flaky) // a refused requeue leaves it there
		d.env = keys
		r := d.ok("requeue", flaky, "-q", d.queue)
		if st := d.state(flaky, errand.StateSuccess); len(st.Results) != 1 || string(st.Results[0].Value) != `"fine now"` {
			t.Errorf("requeue with a key: the Require worker should run the task signed again, got %+v", st.Results)
		}
		noKeyMaterial(t, "enqueue and requeue", r)
	})
}

// TestSigningKeysBadInput: malformed keys are usage errors that never
// echo a secret, and nothing is opened.
func TestSigningKeysBadInput(t *testing.T) {
	t.Parallel()
	d := memoryDeployment(t)
	short := base64.StdEncoding.EncodeToString([]byte("short"))
	for _, c := range []struct {
		keys string
		args []string
		want []string
		leak string
	}{
		{"k1=" + short, nil, []string{`entry 1: the secret is 5 bytes, want at least 16`}, short},
		{"k1", nil, []string{"entry 1 is not ID=SECRET", "ERRAND_SIGNING_KEYS"}, ""},
		{"k1=%%notbase64%%", nil, []string{`entry 1: the secret is not base64`}, "notbase64"},
		{"k1=hex:zz" + wrongHex, nil, []string{`entry 1: the secret after hex: is not hexadecimal`}, wrongHex},
		{"k1=" + testB64 + ",k1=" + testB64, nil, []string{`entry 2 repeats the key ID of an earlier entry`}, testB64},
		// A bare secret (no "ID="): its base64 padding must not make the
		// secret read as an ID quoted back.
		{testB64, nil, []string{"entry 1 has no secret after its ="}, strings.TrimRight(testB64, "=")},
		{"bad id=" + testB64, nil, []string{`key id "bad id"`}, testB64},
		{"k1=" + testB64, []string{"--sign-with", "k2"}, []string{"--sign-with k2: no key of that id", "k1"}, testB64},
		{"", []string{"--sign-with", "k2"}, []string{"--sign-with k2: no signing keys given"}, ""},
		{"", []string{"--signing-keys-file", filepath.Join(t.TempDir(), "none")}, []string{"--signing-keys-file"}, ""},
	} {
		d.env = map[string]string{"ERRAND_SIGNING_KEYS": c.keys}
		r := d.fails(2, c.want, append([]string{"queues"}, c.args...)...)
		if c.leak != "" && strings.Contains(r.stdout+r.stderr, c.leak) {
			t.Errorf("secrets promise broken: a bad ERRAND_SIGNING_KEYS was echoed:\n%s", r)
		}
	}
	// The help names the flags, never a value.
	d.env = map[string]string{"ERRAND_SIGNING_KEYS": "k1=" + testB64}
	r := d.ok("help", "show")
	if !strings.Contains(r.stdout, "-signing-keys-file FILE") || !strings.Contains(r.stdout, "-sign-with ID") {
		t.Errorf("errand help show should list --signing-keys-file and --sign-with, got:\n%s", r)
	}
	noKeyMaterial(t, "help", r)
}
