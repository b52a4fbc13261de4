package batchapi

import "errors"

var (
	// ErrNotSubmitted: the batch has not reached the provider yet (it is
	// still being submitted), so it cannot be cancelled.
	ErrNotSubmitted = errors.New("batchapi: batch not submitted yet")
	// ErrFinished: the batch is already final.
	ErrFinished = errors.New("batchapi: batch already finished")
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("batchapi: service already started")
)
