package migrations

import "errors"

// ErrUnknownVersion is returned by Down when the newest applied version is
// not one this binary knows (it was applied by a newer llmq).
var ErrUnknownVersion = errors.New("migrations: applied version unknown to this binary")
