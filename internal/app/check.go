package app

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/worker"
)

// Check validates the settings that need the component that owns them:
// the batch window and zone (batchapi's grammar), the batch line limit, and
// the bounds that involve a component's default (a retry.max_delay below
// the worker's base delay, a backpressure.hard_depth at or below the
// producer's soft depth). Like config.Validate, each error matches
// config.ErrInvalid and names the setting. New calls it.
func Check(s *config.Config) error {
	var errs []error
	bad := func(setting, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", config.ErrInvalid, setting, fmt.Sprintf(format, args...)))
	}
	b := s.Batch
	if _, err := batchapi.ParseWindow("", b.Timezone); err != nil {
		bad("batch.timezone", "%v", err)
	} else if w, err := batchapi.ParseWindow(b.Window, b.Timezone); err != nil {
		bad("batch.window", "%v", err)
	} else if b.Window != "" && b.Window != batchapi.WindowOff && w.String() == batchapi.WindowOff {
		bad("batch.window", "%q is empty (use %q for no window)", b.Window, batchapi.WindowOff)
	}
	if b.MaxLines > batchapi.MaxLinesDefault {
		bad("batch.max_lines", "must be in 1..%d (0: the default); got %d", batchapi.MaxLinesDefault, b.MaxLines)
	}
	r := s.Retry
	if base := cmp.Or(r.BaseDelay, worker.BackoffBaseDefault); r.MaxDelay > 0 && r.MaxDelay < base {
		bad("retry.max_delay", "must be at least retry.base_delay (%v)", base)
	}
	bp := s.Backpressure
	if soft, hard := cmp.Or(bp.SoftDepth, producer.SoftDepthDefault), cmp.Or(bp.HardDepth, producer.HardDepthDefault); hard <= soft {
		bad("backpressure.hard_depth", "must exceed backpressure.soft_depth (%d); got %d", soft, hard)
	}
	return errors.Join(errs...)
}
