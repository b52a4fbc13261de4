package upstreamsim

import "errors"

// Sentinel errors returned by the package's Go API.
var (
	// ErrInvalidConfig is wrapped by Config.Validate and New.
	ErrInvalidConfig = errors.New("upstreamsim: invalid config")
	// ErrAlreadyStarted is returned by Start when the server is running.
	ErrAlreadyStarted = errors.New("upstreamsim: already started")
)
