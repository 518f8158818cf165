package driver

// BatchErrors returns the answer of a batch call that failed as a whole
// (see the package doc's "Batch calls"): nil when err is nil, else err
// once for each of the n items.
func BatchErrors(n int, err error) []error {
	if err == nil {
		return nil
	}
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// EachItem answers a batch call whose items a driver handles one at a
// time, in order: it calls do for each index and returns the answer the
// package doc's "Batch calls" asks for (nil when every item succeeded,
// else one error per item, nil where it succeeded).
func EachItem(n int, do func(i int) error) []error {
	var errs []error
	for i := range n {
		if err := do(i); err != nil {
			if errs == nil {
				errs = make([]error, n)
			}
			errs[i] = err
		}
	}
	return errs
}
