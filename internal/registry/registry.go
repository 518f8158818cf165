// Package registry keeps the URL openers drivers register, by scheme. The
// package driver writes to it (RegisterBroker, RegisterBackend) and the root
// package errand reads it (OpenBroker, OpenBackend), so neither exports the
// other's half.
package registry

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Openers maps URL schemes to opener functions of type T.
type Openers[T any] struct {
	kind string // "broker" or "backend", for messages
	mu   sync.RWMutex
	m    map[string]T
}

// New returns an empty set of openers of a kind ("broker", "backend").
func New[T any](kind string) *Openers[T] { return &Openers[T]{kind: kind, m: map[string]T{}} }

// Register adds open under scheme. It panics if the scheme is taken:
// two drivers claiming one scheme is a programming error found at init.
func (o *Openers[T]) Register(scheme string, open T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, dup := o.m[scheme]; dup {
		panic(fmt.Sprintf("errand: %s scheme %q registered twice", o.kind, scheme))
	}
	o.m[scheme] = open
}

// Lookup returns the opener of scheme, and whether there is one.
func (o *Openers[T]) Lookup(scheme string) (T, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	open, ok := o.m[scheme]
	return open, ok
}

// Schemes lists the registered schemes, sorted, or "none".
func (o *Openers[T]) Schemes() string {
	o.mu.RLock()
	defer o.mu.RUnlock()
	names := make([]string, 0, len(o.m))
	for k := range o.m {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// The process-wide openers; values are funcs of the unnamed types under
// driver.BrokerOpener and driver.BackendOpener, so errand can call either
// through one generic function.
var (
	Brokers  = New[any]("broker")
	Backends = New[any]("backend")
)
