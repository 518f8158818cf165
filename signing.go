package errand

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Signing configures HMAC-SHA256 message signatures (Config.Signing), in
// the spirit of Celery's auth serializer: a producer signs the exact bytes
// of every message it publishes — tasks, groups, chords, chains, and a
// worker's retries and callbacks — and a worker checks the signature
// before it decodes anything. Producers and workers share the keys through
// their configuration, never through the broker.
//
// # Envelope
//
// A signed message body is one header line followed by the encoded
// signature, unchanged:
//
//	errand-sig:v1:<key id>:<mac>\n<body>
//
// where mac is base64url (no padding) of HMAC-SHA256 under the key named
// by key id, over "errand-sig:v1:<key id>:" followed by body. The header
// counts toward the broker's payload limit (ErrPayloadTooLarge).
//
// # Verification
//
// A worker whose server has a Signing sets aside (Broker.Reject, dead
// letters) with a reason wrapping ErrBadSignature, and never runs, a
// message whose signature does not verify under the key it names, or
// whose header is malformed. With Require it also sets aside unsigned
// messages and messages signed with a key id it does not have; without
// Require those run (a migration step: start signing, then require). A
// worker without a Signing runs signed messages unverified.
//
// # Key rotation
//
// Keys holds several keys by id. To rotate, add the new key to every
// worker, then sign with it (SignWith) on every producer, and remove the
// old key once no message signed with it can still be queued (delayed
// tasks and retries included).
type Signing struct {
	// Keys maps key ids to secrets. An id is 1 to 64 characters of
	// [A-Za-z0-9._-]; a secret is at least 16 bytes (32 random bytes is
	// the recommendation). Required.
	Keys map[string][]byte
	// SignWith is the id of the key this server signs its messages with.
	// Empty: messages are sent unsigned (a worker-only configuration, or
	// the first step of adopting signatures).
	SignWith string
	// Require makes workers set aside every message not signed with one
	// of Keys. Default: false.
	Require bool
}

const sigPrefix = "errand-sig:v1:"

// minKeySize is the shortest secret Signing accepts, in bytes.
const minKeySize = 16

// check validates s; NewServer calls it.
func (s *Signing) check() error {
	if len(s.Keys) == 0 {
		return errors.New("errand: Config.Signing: no keys")
	}
	for id, k := range s.Keys {
		if !validKeyID(id) {
			return fmt.Errorf("errand: Config.Signing: key id %q: want 1 to 64 characters of [A-Za-z0-9._-]", id)
		}
		if len(k) < minKeySize {
			return fmt.Errorf("errand: Config.Signing: key %q is %d bytes, want at least %d", id, len(k), minKeySize)
		}
	}
	if _, ok := s.Keys[s.SignWith]; s.SignWith != "" && !ok {
		return fmt.Errorf("errand: Config.Signing: SignWith names key %q, which is not in Keys", s.SignWith)
	}
	return nil
}

func validKeyID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

func mac(key []byte, id string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(sigPrefix))
	h.Write([]byte(id))
	h.Write([]byte{':'})
	h.Write(body)
	return h.Sum(nil)
}

// seal returns body in a signed envelope under SignWith, or body itself
// when s signs nothing.
func (s *Signing) seal(body []byte) []byte {
	if s == nil || s.SignWith == "" {
		return body
	}
	m := base64.RawURLEncoding.EncodeToString(mac(s.Keys[s.SignWith], s.SignWith, body))
	out := make([]byte, 0, len(sigPrefix)+len(s.SignWith)+1+len(m)+1+len(body))
	out = append(out, sigPrefix...)
	out = append(out, s.SignWith...)
	out = append(out, ':')
	out = append(out, m...)
	out = append(out, '\n')
	return append(out, body...)
}

// open checks raw's envelope against s (nil: no signing configured) and
// returns the body inside it. Any error wraps ErrBadSignature.
func (s *Signing) open(raw []byte) ([]byte, error) {
	body, _, _, err := s.inspect(raw)
	if err != nil {
		return nil, err
	}
	return body, nil
}

// inspect is open's check, with what the operator's view shows beside it:
// the body inside the envelope (raw itself when it is unsigned; nil only
// for a header without a body), the key id the header names ("" when
// unsigned or malformed), whether the MAC verified under s's key of that
// id, and the error a worker under s sets the message aside with (nil when
// it runs it). The body is returned even when the check fails, so that an
// operator can see what a forged or altered message holds; only open's
// caller decides whether to trust it.
func (s *Signing) inspect(raw []byte) (body []byte, id string, verified bool, err error) {
	if !bytes.HasPrefix(raw, []byte(sigPrefix)) {
		if s != nil && s.Require {
			return raw, "", false, fmt.Errorf("%w: message is not signed, and this worker requires signatures", ErrBadSignature)
		}
		return raw, "", false, nil
	}
	header, body, ok := bytes.Cut(raw, []byte{'\n'})
	if !ok {
		return nil, "", false, fmt.Errorf("%w: signature header without a body", ErrBadSignature)
	}
	id, m, ok := strings.Cut(string(header[len(sigPrefix):]), ":")
	if !ok || !validKeyID(id) {
		return body, "", false, fmt.Errorf("%w: malformed signature header", ErrBadSignature)
	}
	got, err := base64.RawURLEncoding.DecodeString(m)
	if err != nil || len(got) != sha256.Size {
		return body, id, false, fmt.Errorf("%w: malformed MAC under key %q", ErrBadSignature, id)
	}
	if s == nil {
		return body, id, false, nil // no keys here: run it unverified
	}
	key, ok := s.Keys[id]
	if !ok {
		if s.Require {
			return body, id, false, fmt.Errorf("%w: signed with key %q, which this worker does not have", ErrBadSignature, id)
		}
		return body, id, false, nil
	}
	if !hmac.Equal(got, mac(key, id, body)) {
		return body, id, false, fmt.Errorf("%w: MAC does not verify under key %q (forged, altered or signed with another secret)", ErrBadSignature, id)
	}
	return body, id, true, nil
}
