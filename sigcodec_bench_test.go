package errand

import (
	"testing"
	"time"
)

// benchSignature is a task as a worker sees most: a few basic arguments,
// a queue, a group, an ETA.
func benchSignature() *Signature {
	eta := time.Date(2026, 11, 26, 14, 0, 0, 123456789, time.UTC)
	s := NewSignature("send_email", "user@example.com", int64(42), 1.5, true)
	s.RoutingKey, s.GroupUUID, s.GroupTaskCount, s.ETA = "mail", "8a4d9f0e-2f0c-4e53-9a4e-6a1f0c2b7d11", 3, &eta
	s.OnSuccess = []*Signature{NewSignature("log_sent", "x")}
	return s
}

// BenchmarkEncodeSignature measures the Signature encoder (sigencode.go).
func BenchmarkEncodeSignature(b *testing.B) {
	s := benchSignature()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeSignature(s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeSignature measures the Signature decoder (sigdecode.go).
func BenchmarkDecodeSignature(b *testing.B) {
	wire, err := EncodeSignature(benchSignature())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeSignature(wire); err != nil {
			b.Fatal(err)
		}
	}
}
