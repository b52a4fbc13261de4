package bench

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"slices"
)

// Scenario names.
const (
	ScenarioStrategies = "strategies"
	ScenarioBurst      = "burst"
	ScenarioFallback   = "fallback"
	ScenarioAdaptive   = "adaptive"
	ScenarioBacklog    = "backlog"
	ScenarioSizes      = "sizes"
	ScenarioRoom       = "room"
	ScenarioEnqueue    = "enqueue"
	ScenarioLearn      = "learn"
	ScenarioGateway    = "gateway"
	ScenarioThroughput = "throughput"
	ScenarioMillion    = "million"
	ScenarioFleet      = "fleet"
)

// Scenarios lists every scenario in the order Run runs them.
var Scenarios = []string{ScenarioStrategies, ScenarioBurst, ScenarioFallback, ScenarioAdaptive, ScenarioBacklog, ScenarioGateway, ScenarioSizes, ScenarioRoom, ScenarioEnqueue, ScenarioLearn, ScenarioThroughput, ScenarioMillion, ScenarioFleet}

// Defaults of Config.
const (
	// OutDefault is the report folder.
	OutDefault = "docs/bench"
	// PostgresURLDefault is the server on which each run creates its own
	// database (the URL's database name is replaced).
	PostgresURLDefault = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	// ScaleDefault keeps the durations as designed (about 25 minutes in
	// all).
	ScaleDefault = 1.0
)

// RabbitMQURLDefault is the RabbitMQ server of the enqueue scenario.
const RabbitMQURLDefault = "amqp://guest:guest@127.0.0.1:5672/"

// Config configures a bench run.
type Config struct {
	// Out is the folder of report.md and the PNGs, created when missing.
	// "" = OutDefault.
	Out string
	// PostgresURL names the Postgres server; each run creates a database
	// of its own there and drops it after. "" = PostgresURLDefault.
	PostgresURL string
	// Scale multiplies every duration of every scenario (quotas are
	// kept), and the gateway scenario's calls per agent (at least one).
	// 0 = ScaleDefault; tests use 0.1.
	Scale float64
	// Broker is the broker of the throughput scenario, in a form of
	// LLMQ_BROKER. "" = an in-memory broker.
	Broker string
	// Only runs the named scenarios (see Scenarios). Empty = all.
	Only []string
	// Progress receives one line per run. nil = io.Discard.
	Progress io.Writer
	// Logger receives the components' logs. nil = discarded.
	Logger *slog.Logger
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Out = cmp.Or(c.Out, OutDefault)
	c.PostgresURL = cmp.Or(c.PostgresURL, PostgresURLDefault)
	c.Scale = cmp.Or(c.Scale, ScaleDefault)
	if len(c.Only) == 0 {
		c.Only = Scenarios
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.Scale <= 0 {
		return fmt.Errorf("%w: Scale must be positive, got %v", ErrInvalidConfig, c.Scale)
	}
	for _, s := range c.Only {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("%w: Only: unknown scenario %q (want one of %v)", ErrInvalidConfig, s, Scenarios)
		}
	}
	return nil
}

func (c Config) runs(name string) bool { return slices.Contains(c.Only, name) }
