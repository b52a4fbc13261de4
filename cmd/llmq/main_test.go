package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one leaves a goroutine behind
// (the commands run in-process here, and their servers, pools and
// subscriptions must all stop).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
