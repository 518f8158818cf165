package uuid

import (
	"regexp"
	"testing"
)

var canonical = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-([0-9a-f])[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestNew: random UUIDs are version 4 in canonical form, and differ.
func TestNew(t *testing.T) {
	a, b := New(), New()
	for _, u := range []string{a, b} {
		if m := canonical.FindStringSubmatch(u); m == nil || m[1] != "4" {
			t.Fatalf("New() = %q; want a canonical version 4 UUID", u)
		}
	}
	if a == b {
		t.Fatalf("New() returned %q twice", a)
	}
}

// TestSHA1: name-based UUIDs are RFC 9562's version 5 (the RFC's
// example: "www.example.com" in the DNS namespace), the same every time.
func TestSHA1(t *testing.T) {
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	if got, want := SHA1(dns, "www.example.com"), "2ed6657d-e927-568b-95e1-2665a8aea6a2"; got != want {
		t.Fatalf("SHA1(DNS, www.example.com) = %s; want %s (RFC 9562)", got, want)
	}
}
