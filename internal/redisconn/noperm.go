package redisconn

import (
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// PermError is Redis's refusal of a command for an ACL user's permissions
// (NOPERM), with the command and the keys it named: Redis's own message
// ("NOPERM this user has no permissions to access one of the keys used as
// arguments") says neither. Err is Redis's error.
type PermError struct {
	Command string   // the command's name, in capitals (SADD, EVALSHA)
	Keys    []string // the keys it named; one of them is refused
	Err     error
}

func (e *PermError) Error() string {
	if len(e.Keys) == 1 {
		return fmt.Sprintf("%v: %s of the key %s", e.Err, e.Command, e.Keys[0])
	}
	return fmt.Sprintf("%v: %s of the keys %s (Redis's ACL LOG names the one refused)", e.Err, e.Command, strings.Join(e.Keys, ", "))
}

func (e *PermError) Unwrap() error { return e.Err }

// IsNoPerm reports whether err is Redis's NOPERM refusal.
func IsNoPerm(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOPERM")
}

// PermErr returns err as a *PermError naming cmd and its keys when err is
// Redis's NOPERM, else err. The keys of EVAL and EVALSHA are their KEYS;
// those of any other command, its first argument.
func PermErr(cmd goredis.Cmder, err error) error {
	if !IsNoPerm(err) {
		return err
	}
	args := cmd.Args()
	name := strings.ToUpper(cmd.Name())
	var keys []string
	switch name {
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO":
		if len(args) > 2 {
			n, _ := args[2].(int)
			for i := 3; i < 3+n && i < len(args); i++ {
				keys = append(keys, fmt.Sprint(args[i]))
			}
		}
	default:
		if len(args) > 1 {
			keys = []string{fmt.Sprint(args[1])}
		}
	}
	return &PermError{Command: name, Keys: keys, Err: err}
}

// TxErr is the error of a transaction (MULTI ... EXEC) of cmds whose
// EXEC failed with err. When Redis refused a command as it was queued (an
// ACL user's NOPERM, say), it discards the whole transaction with
// EXECABORT, and go-redis keeps the refusal on that command only: TxErr
// returns the first refusal (a *PermError for NOPERM) wrapping err too, so
// errors.Is(TxErr(...), err) holds. Otherwise it returns err.
func TxErr(cmds []goredis.Cmder, err error) error {
	if err == nil || !strings.HasPrefix(err.Error(), "EXECABORT") {
		return err
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && !strings.HasPrefix(e.Error(), "EXECABORT") {
			return fmt.Errorf("%w; %w", PermErr(c, e), err)
		}
	}
	return err
}
