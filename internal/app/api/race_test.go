//go:build race

package api_test

// raceDetector says the tests run under the race detector, which
// multiplies the memory a process uses.
const raceDetector = true
