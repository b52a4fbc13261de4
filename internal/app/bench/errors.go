package bench

import "errors"

// ErrInvalidConfig is wrapped by Config validation errors.
var ErrInvalidConfig = errors.New("bench: invalid configuration")
