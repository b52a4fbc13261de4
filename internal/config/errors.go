package config

import "errors"

// ErrInvalid is matched (errors.Is) by every validation error of Load and
// Validate; the message names the failing setting.
var ErrInvalid = errors.New("invalid configuration")
