package batchapi

import (
	"errors"
	"fmt"
)

var (
	// ErrNotSubmitted: the batch has not reached the provider yet (it is
	// still being submitted), so it cannot be cancelled.
	ErrNotSubmitted = errors.New("batchapi: batch not submitted yet")
	// ErrFinished: the batch is already final.
	ErrFinished = errors.New("batchapi: batch already finished")
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("batchapi: service already started")
)

// AnswerTooLargeError: the provider's answer about a batch (or an upload)
// is larger than the client reads (NewClient).
type AnswerTooLargeError struct {
	// Limit is the bound in bytes.
	Limit int64
}

func (e *AnswerTooLargeError) Error() string {
	return fmt.Sprintf("batchapi: the provider's answer is larger than %d bytes", e.Limit)
}
