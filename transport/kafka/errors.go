package kafka

import "errors"

// errNoBrokers is returned when a config names no broker.
var errNoBrokers = errors.New("kafka: no broker address")
