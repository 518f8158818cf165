// Package e2e holds errand's cross-driver end-to-end tests (a broker of one
// driver module with a backend of another). It is a test-only module, so
// that no driver module requires another driver module.
package e2e
