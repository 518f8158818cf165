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
