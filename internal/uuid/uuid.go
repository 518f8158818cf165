// Package uuid makes errand's UUIDs in their canonical text form
// (RFC 9562): random ones for tasks and groups (package errand) and
// name-based ones for scheduled ticks (package schedule), which must be
// the same on every scheduler that computes them.
package uuid

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
)

// New returns a random (version 4) UUID.
func New() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("errand: crypto/rand failed: " + err.Error())
	}
	return format(b, 4)
}

// SHA1 returns the name-based (version 5) UUID of name in namespace:
// the same for the same two, always.
func SHA1(namespace [16]byte, name string) string {
	h := sha1.New()
	h.Write(namespace[:])
	h.Write([]byte(name))
	var b [16]byte
	copy(b[:], h.Sum(nil))
	return format(b, 5)
}

// format sets b's version and variant (RFC 9562's) and writes it as
// xxxxxxxx-xxxx-Vxxx-Yxxx-xxxxxxxxxxxx.
func format(b [16]byte, version byte) string {
	b[6] = b[6]&0x0f | version<<4
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}
