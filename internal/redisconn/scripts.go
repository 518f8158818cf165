package redisconn

import (
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// Scripts is a Redis driver's set of Lua scripts, each made of parts —
// its prologue (naming its KEYS and ARGV), the shared snippets it uses,
// its body — and kept with its text, so the driver's tests can check
// every prologue against the Go helper that builds the script's keys
// (redistest.CheckPrologues). A driver declares one Scripts and makes
// every script with its New while the package initialises; the zero
// value is ready to use. Not safe for concurrent New.
type Scripts struct {
	text map[*goredis.Script]string
}

// New is a script whose text is parts joined.
func (ss *Scripts) New(parts ...string) *goredis.Script {
	text := strings.Join(parts, "")
	s := goredis.NewScript(text)
	if ss.text == nil {
		ss.text = map[*goredis.Script]string{}
	}
	ss.text[s] = text
	return s
}

// Text is the text of s, when New made it.
func (ss *Scripts) Text(s *goredis.Script) (string, bool) {
	text, ok := ss.text[s]
	return text, ok
}

// Len is the number of scripts New made.
func (ss *Scripts) Len() int { return len(ss.text) }
