// Package named keeps process-wide instances by name, for drivers whose URL
// form "scheme://NAME" must return the same instance for the same name.
package named

import "sync"

// Registry maps names to instances of T.
type Registry[T comparable] struct {
	mu sync.Mutex
	m  map[string]T
}

// Get returns the instance named name, creating it with make(name) on first
// use. An empty name means a private instance: make("") every time, never
// registered.
func (r *Registry[T]) Get(name string, make func(name string) T) T {
	if name == "" {
		return make("")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.m[name]; ok {
		return v
	}
	if r.m == nil {
		r.m = map[string]T{}
	}
	v := make(name)
	r.m[name] = v
	return v
}

// Forget removes name if it still refers to v (a closed instance).
func (r *Registry[T]) Forget(name string, v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.m[name]; ok && cur == v {
		delete(r.m, name)
	}
}
