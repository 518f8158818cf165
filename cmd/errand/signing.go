package main

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/errand-go/errand"
)

// Signing keys (errand.Signing): the operator commands verify the signed
// messages they show, and sign what enqueue and requeue send, with the
// keys of --signing-keys-file or ERRAND_SIGNING_KEYS. Keys are secrets:
// they are read from a file or the environment, never from a flag's value
// (a command line shows in ps), and never printed, not even in an error.

// envSigningKeys holds the keys when --signing-keys-file is not given.
const envSigningKeys = "ERRAND_SIGNING_KEYS"

// keysHint says where the keys come from, for messages.
const keysHint = "--signing-keys-file FILE or " + envSigningKeys

// minSecret is the shortest secret errand.Signing takes, in bytes.
const minSecret = 16

// signing returns the Signing the flags and the environment give: the keys
// of --signing-keys-file, else of ERRAND_SIGNING_KEYS, signing with
// --sign-with, else the first key listed. It returns nil without keys.
func (c *cli) signing() (*errand.Signing, error) {
	text, from := c.env(envSigningKeys), envSigningKeys
	if c.keysFile != "" {
		b, err := os.ReadFile(c.keysFile)
		if err != nil {
			return nil, usageErrorf("--signing-keys-file: %v", err)
		}
		text, from = string(b), "--signing-keys-file "+c.keysFile
	}
	keys, order, err := parseKeys(text)
	if err != nil {
		return nil, usageErrorf("signing keys of %s: %v", from, err)
	}
	if len(keys) == 0 {
		if c.keysFile != "" {
			return nil, usageErrorf("signing keys of %s: no keys in it", from)
		}
		if c.signWith != "" {
			return nil, usageErrorf("--sign-with %s: no signing keys given (%s)", c.signWith, keysHint)
		}
		return nil, nil
	}
	sg := &errand.Signing{Keys: keys, SignWith: order[0]}
	if c.signWith != "" {
		if _, ok := keys[c.signWith]; !ok {
			return nil, usageErrorf("--sign-with %s: no key of that id in %s (its keys: %s)", c.signWith, from, strings.Join(order, ", "))
		}
		sg.SignWith = c.signWith
	}
	return sg, nil
}

// parseKeys reads signing keys: ID=SECRET entries separated by commas or
// newlines (blank lines and lines starting with # are skipped), in the
// order given. SECRET is base64 (standard or URL alphabet, padded or not),
// or hex after "hex:"; "base64:" may precede base64. The id is checked by
// errand.NewServer. No error holds a secret or any part of one.
func parseKeys(text string) (map[string][]byte, []string, error) {
	keys := map[string][]byte{}
	var order []string
	n := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, e := range strings.Split(line, ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			n++
			id, secret, ok := strings.Cut(e, "=")
			id = strings.TrimSpace(id)
			if !ok || id == "" {
				return nil, nil, fmt.Errorf("entry %d is not ID=SECRET", n)
			}
			// Entries are named by number, never by their ID: a bare secret
			// (no "ID=") whose base64 padding reads as the "=" would
			// otherwise be quoted as an ID.
			if _, dup := keys[id]; dup {
				return nil, nil, fmt.Errorf("entry %d repeats the key ID of an earlier entry", n)
			}
			if strings.TrimSpace(secret) == "" {
				return nil, nil, fmt.Errorf("entry %d has no secret after its = (the form is ID=SECRET)", n)
			}
			k, err := decodeSecret(strings.TrimSpace(secret))
			if err != nil {
				return nil, nil, fmt.Errorf("entry %d: %v (the form is ID=SECRET)", n, err)
			}
			if len(k) < minSecret {
				return nil, nil, fmt.Errorf("entry %d: the secret is %d bytes, want at least %d (the form is ID=SECRET; 32 random bytes: openssl rand -base64 32)", n, len(k), minSecret)
			}
			keys[id] = k
			order = append(order, id)
		}
	}
	return keys, order, nil
}

// decodeSecret decodes one key's secret (see parseKeys).
func decodeSecret(s string) ([]byte, error) {
	if h, ok := strings.CutPrefix(s, "hex:"); ok {
		k, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("the secret after hex: is not hexadecimal")
		}
		return k, nil
	}
	s = strings.TrimPrefix(s, "base64:")
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			return k, nil
		}
	}
	return nil, fmt.Errorf("the secret is not base64 (or hex after hex:)")
}
