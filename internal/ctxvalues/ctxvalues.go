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
