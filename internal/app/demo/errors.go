package demo

import "errors"

// ErrInvalidConfig is wrapped by Config validation errors.
var ErrInvalidConfig = errors.New("demo: invalid configuration")

// ErrTimeout is returned when the jobs did not all reach a terminal state
// within Config.Timeout.
var ErrTimeout = errors.New("demo: jobs did not finish in time")

// ErrNotClean is returned by `llmq demo` when a valid job did not succeed
// or a malformed message was not dead-lettered.
var ErrNotClean = errors.New("demo: the run did not end clean")
