package sqsbroker

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// sqsName is SQS's rule for a queue name: 1 to 80 characters of
// [A-Za-z0-9_-], and for a FIFO queue the suffix ".fifo" (counted in the
// 80), the only dot allowed. fauxqs accepts names SQS refuses, so the rule
// is checked here, on the client.
var sqsName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

func validName(name string, fifo bool) error {
	if len(name) < 1 || len(name) > 80 {
		return fmt.Errorf("%q: %d characters, want 1 to 80", name, len(name))
	}
	base := name
	if fifo {
		var ok bool
		if base, ok = strings.CutSuffix(name, ".fifo"); !ok {
			return fmt.Errorf("%q: a FIFO queue's name must end in .fifo", name)
		}
	}
	if !sqsName.MatchString(base) {
		return fmt.Errorf("%q: only [A-Za-z0-9_-] allowed (and .fifo as a FIFO queue's suffix)", name)
	}
	return nil
}

// TestQueueNamesValid: every name the broker gives SQS — the queue of a
// key and its dead-letter queue, standard and FIFO — satisfies SQS's rules
// for any prefix and key (odd characters, every length across the hashing
// boundary), a FIFO queue's dead-letter queue is FIFO too (NAME-dead.fifo,
// not the NAME.fifo-dead of earlier versions, which SQS refuses), and
// Queues leaves dead-letter queues out.
func TestQueueNamesValid(t *testing.T) {
	prefixes := []string{"errand-", "", "my.app/", "ü-", strings.Repeat("p", 90)}
	keys := []string{"a", "emails.high", "ünïcode", "with space", "-dead-end", strings.Repeat("k", 200)}
	for n := 55; n <= 85; n++ {
		keys = append(keys, strings.Repeat("x", n))
	}
	for _, fifo := range []bool{false, true} {
		for _, prefix := range prefixes {
			b := New(nil, &Options{QueuePrefix: prefix, FIFO: fifo})
			for _, key := range keys {
				q := b.queueName(key)
				dead := deadName(q)
				for _, name := range []string{q, dead} {
					if err := validName(name, fifo); err != nil {
						t.Errorf("queue naming promise broken (FIFO %v, prefix %q, key %q): SQS would refuse %v", fifo, prefix, key, err)
					}
				}
				if dead == q || strings.HasSuffix(dead, ".fifo") != fifo {
					t.Errorf("queue naming promise broken (FIFO %v): dead-letter queue of %q is %q", fifo, q, dead)
				}
				p := badChars.ReplaceAllString(b.opts.QueuePrefix, "-")
				if k, listed := b.errandQueue(p, dead); listed {
					t.Errorf("queue listing promise broken (FIFO %v): dead-letter queue %q listed as %q", fifo, dead, k)
				}
			}
		}
	}
	if got := deadName("errand-q.fifo"); got != "errand-q-dead.fifo" {
		t.Errorf("deadName(errand-q.fifo) = %q, want errand-q-dead.fifo", got)
	}
	if got := deadName("errand-q"); got != "errand-q-dead" {
		t.Errorf("deadName(errand-q) = %q, want errand-q-dead", got)
	}
	// A FIFO dead-letter queue an earlier version made (on an emulator) is
	// not listed either.
	for _, fifo := range []bool{false, true} {
		b := New(nil, &Options{QueuePrefix: "errand-", FIFO: fifo})
		if k, listed := b.errandQueue("errand-", "errand-q.fifo-dead"); listed {
			t.Errorf("queue listing promise broken (FIFO %v): old-style dead-letter queue listed as %q", fifo, k)
		}
	}
}
