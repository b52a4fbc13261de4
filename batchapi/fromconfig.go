package batchapi

import (
	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/config"
)

// FromConfig returns the Config fields that come from llmq's configuration
// file: the window, zone, drain threshold, flush interval, line limit and
// the per-model prices with their batch discounts. The caller adds Store,
// Client, Publisher, Destination, Drain, Logger and Registerer.
func FromConfig(c *config.Config) Config {
	out := Config{
		Window:         c.Batch.Window,
		Timezone:       c.Batch.Timezone,
		DrainThreshold: c.Batch.DrainThreshold,
		FlushInterval:  c.Batch.FlushInterval,
		MaxLines:       c.Batch.MaxLines,
		Catalog:        llmq.Catalog{Models: c.Models},
	}
	return out
}
