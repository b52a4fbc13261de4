package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/llmq/llmq/batchapi"
	"github.com/llmq/llmq/internal/app/api"
	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/redact"
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

// ErrUpstreamRefused is matched by New's error when an upstream the worker
// calls refused its start-up check.
var ErrUpstreamRefused = errors.New("upstream check failed")

// upstreamCheckTimeout bounds the start-up question to one upstream.
const upstreamCheckTimeout = 10 * time.Second

// upstreamTarget is an upstream the worker calls, named by the setting that
// addresses it, with the models it should serve.
type upstreamTarget struct {
	setting, url, key, keySetting string
	models                        []string
}

// checkUpstreams asks each upstream the worker calls (OPENAI_BASE_URL and
// every pool entry) for GET /models with its key, through the worker's own
// client. A refused key (401, 403) or an llmq API in the provider's place
// stops start-up: every call would fail. An upstream that does not answer
// is logged and start-up goes on: it may come up later, and jobs wait for
// it. So is a model of models that a non-empty list lacks (a typo the
// provider would answer with 404).
func (a *App) checkUpstreams(ctx context.Context) error {
	s, wc := a.cfg.Settings, a.cfg.Worker
	single := upstreamTarget{setting: config.EnvOpenAIBaseURL, url: s.OpenAIBaseURL, key: s.OpenAIAPIKey,
		keySetting: config.EnvOpenAIAPIKey + " or " + config.EnvOpenAIAPIKey + config.FileSuffix}
	for _, model := range slices.Sorted(maps.Keys(s.Models)) {
		if len(s.Pools[model]) == 0 {
			single.models = append(single.models, model)
		}
	}
	targets := []upstreamTarget{single}
	for _, model := range slices.Sorted(maps.Keys(s.Pools)) {
		for i, e := range s.Pools[model] {
			p := fmt.Sprintf("pools.%s[%d]", model, i)
			targets = append(targets, upstreamTarget{setting: p + ".base_url", url: e.BaseURL, key: e.Key,
				keySetting: p + ".api_key", models: []string{model}})
		}
	}
	var errs []error
	for _, t := range targets {
		uc := upstreamConfig(s, wc)
		uc.BaseURL, uc.APIKey, uc.Timeout = t.url, t.key, upstreamCheckTimeout
		list, err := worker.NewOpenAIClient(uc).ListModels(ctx)
		if err := t.refused(err); err != nil {
			errs = append(errs, err)
			continue
		}
		if err != nil {
			a.log.Warn("the upstream did not answer GET /models; starting anyway, jobs wait for it",
				slog.String("upstream", redact.URL(t.url)), slog.String("error", redact.Text(err.Error(), 300)))
			continue
		}
		listed := map[string]bool{}
		for _, m := range list.Models {
			listed[m.ID] = true
		}
		for _, m := range t.models {
			if len(listed) > 0 && !listed[m] {
				a.log.Warn("the upstream does not list a model of the configuration: its jobs will fail unless it serves it",
					slog.String("upstream", redact.URL(t.url)), slog.String("model", m))
			}
		}
	}
	return errors.Join(errs...)
}

// refused is the start-up error for the answer err of t's GET /models, nil
// when the answer does not stop start-up.
func (t upstreamTarget) refused(err error) error {
	apiErr, ok := errors.AsType[*openai.APIError](err)
	if !ok {
		return nil
	}
	code, _ := apiErr.Code.(string)
	switch {
	case code == api.CodeLoop:
		return fmt.Errorf("%w: %s %s is an llmq API, not a provider: the worker would make each of its calls another job "+
			"(an OPENAI_BASE_URL exported for an OpenAI SDK reaches the worker too); point %s at the provider",
			ErrUpstreamRefused, t.setting, redact.URL(t.url), t.setting)
	case apiErr.HTTPStatusCode == http.StatusUnauthorized || apiErr.HTTPStatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: %s %s refused the key %s (%d %s: %s): set %s to a key it accepts",
			ErrUpstreamRefused, t.setting, redact.URL(t.url), redact.Key(t.key), apiErr.HTTPStatusCode, code,
			redact.Text(apiErr.Message, 200), t.keySetting)
	}
	return nil
}
