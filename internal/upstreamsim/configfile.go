package upstreamsim

import (
	"fmt"
	"os"

	"github.com/llmq/llmq/internal/config"
)

// ParseConfig decodes a YAML configuration (fields as tagged on Config;
// durations like "1.5s"), rejecting unknown fields, and validates it.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := config.DecodeYAML(data, &c); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadConfig reads and parses a YAML configuration file.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("upstreamsim: read config: %w", err)
	}
	return ParseConfig(data)
}
