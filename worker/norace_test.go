//go:build !race

package worker_test

// slowdown is how much slower the race detector makes the tests that
// measure time.
const slowdown = 1
