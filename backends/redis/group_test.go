package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	redisbackend "github.com/errand-go/errand/backends/redis"
	"github.com/errand-go/errand/driver"
)

// TestLargeGroupMembership: InitGroup writes members in batches of 1000; a
// member of every batch counts, and a UUID that is not a member is refused
// with driver.ErrNotMember and changes nothing (issue 15, item 1).
func TestLargeGroupMembership(t *testing.T) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			prefix := fmt.Sprintf("errand-test-large-%d", time.Now().UnixNano())
			b := redisbackend.New(rdb, &redisbackend.Options{Prefix: prefix})
			const n = 2501
			g := "large"
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("m%05d", i)
			}
			if err := b.InitGroup(ctx, g, ids); err != nil {
				t.Fatalf("InitGroup(%d members): %v", n, err)
			}
			t.Cleanup(func() {
				k := "{" + prefix + ":group:" + g + "}:"
				rdb.Del(context.Background(), k+"meta", k+"members", k+"done")
			})
			for i, id := range []string{ids[0], ids[999], ids[1000], ids[1999], ids[2000], ids[n-1]} {
				d, total, err := b.CompleteGroupMember(ctx, g, id)
				if err != nil || d != i+1 || total != n {
					t.Fatalf("member-only count promise broken: member %s of a %d-member group completed %d/%d, %v; want %d/%d", id, n, d, total, err, i+1, n)
				}
			}
			for _, stray := range []string{"m02501", "m0000", "", "total"} {
				if d, total, err := b.CompleteGroupMember(ctx, g, stray); !errors.Is(err, driver.ErrNotMember) {
					t.Fatalf("member-only count promise broken: completing %q, not a member, returned %d/%d, %v; want driver.ErrNotMember", stray, d, total, err)
				}
			}
			if d, _, err := b.CompleteGroupMember(ctx, g, ids[1]); err != nil || d != 7 {
				t.Fatalf("member-only count promise broken: after refused strays the next member counted %d, %v; want 7", d, err)
			}
		})
	}
}
