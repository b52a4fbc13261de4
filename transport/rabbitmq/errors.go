package rabbitmq

import "errors"

// errNacked is returned when the broker nacked a publish.
var errNacked = errors.New("rabbitmq: broker nacked the publish")
