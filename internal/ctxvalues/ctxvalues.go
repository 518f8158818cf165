// Package ctxvalues joins one context's lifetime with another's values.
package ctxvalues

import "context"

// Of returns a context with lifetime's deadline and cancellation and
// values' values first, then lifetime's: a step that must outlive (or
// end before) the call it serves still sees that call's values, such as
// its trace span.
func Of(lifetime, values context.Context) context.Context {
	return valuesCtx{Context: lifetime, values: values}
}

type valuesCtx struct {
	context.Context
	values context.Context
}

func (c valuesCtx) Value(key any) any {
	if v := c.values.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// AfterFunc arranges for f to run once lifetime is done (as
// context.AfterFunc). A context derived from c (WithCancel, WithTimeout)
// follows lifetime's cancellation through it: without it, the context
// package, which finds values' cancellation under c's values, would watch
// c with a goroutine of its own per derived context.
func (c valuesCtx) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(c.Context, f)
}
