package app

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/internal/background"
	"github.com/llmq/llmq/internal/tenancy"
	"github.com/llmq/llmq/store"
)

// Tenants, projects, tenant keys and models are data (docs/design/tenants.md#tenants-as-data):
// the first start imports the configuration's into Postgres, then every
// worker, producer and API replica serves them from a tenancy.Watcher,
// changed at run time by the admin API and llmq apply.

// tenancySource is the store's tenancy tables, reached once the store is
// open.
type tenancySource struct{ a *App }

func (t tenancySource) Load(ctx context.Context) (*store.TenancyRows, error) {
	return t.a.store.Tenancy().Load(ctx)
}

func (t tenancySource) Listen(ctx context.Context, listening, changed func()) error {
	return t.a.store.Tenancy().Listen(ctx, listening, changed)
}

// ImportedKeyName is the name the first start gives a key of the
// configuration: "config-" and the first 8 hex digits of its SHA-256.
func ImportedKeyName(hash [sha256.Size]byte) string { return fmt.Sprintf("config-%x", hash[:4]) }

// startTenancy imports the configuration's tenants and keys when the
// tables were never written, loads them, and runs the watcher as a part.
func (a *App) startTenancy(ctx context.Context) error {
	s := a.cfg.Settings
	keys := make([]store.ImportKey, 0, len(s.APIKeys))
	for _, k := range slices.Sorted(maps.Keys(s.APIKeys)) {
		h := sha256.Sum256([]byte(k))
		keys = append(keys, store.ImportKey{Name: ImportedKeyName(h), Tenant: s.APIKeys[k], Hash: h[:]})
	}
	imported, err := a.store.Tenancy().Import(ctx, s.Tenants, keys)
	if err != nil {
		return err
	}
	modelsImported, err := a.store.Tenancy().ImportModels(ctx, s.Models)
	if err != nil {
		return err
	}
	if err := a.tenancy.Load(ctx); err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	a.useModelRows(modelsImported)
	if imported {
		a.log.Info("tenancy: imported the configuration's tenants and API keys into the database, which is their source from now on",
			slog.Int("tenants", len(a.tenancy.Tenants())), slog.Int("keys", len(keys)))
	} else if ignored := a.ignoredKeys(keys); ignored > 0 {
		a.log.Warn("tenancy: API keys of the configuration are not in the database, which is the source of keys since the first start: "+
			"create them with llmq keys create", slog.Int("keys", ignored))
	}
	var run background.Runner
	a.parts.add("tenancy", func(ctx context.Context) error {
		return run.Start(ctx, a.tenancy.Run)
	}, run.Stop, stopTimeout)
	return nil
}

// useModelRows makes the models kept as data the settings' models, for
// every component built from now on (the database wins after the first
// import); the watcher's loads change them at run time.
func (a *App) useModelRows(imported bool) {
	rows := a.tenancy.Snapshot().Models
	if rows == nil {
		return
	}
	if imported {
		a.log.Info("models: imported the configuration's models into the database, which is their source from now on",
			slog.Int("models", len(rows)))
	} else if !maps.EqualFunc(rows, a.cfg.Settings.Models, func(x, y llmq.Model) bool { return reflect.DeepEqual(x, y) }) {
		a.log.Warn("models: the database's models differ from the configuration's and are applied: the database is their source " +
			"since the first start (llmq apply and llmq models change them)")
	}
	s := *a.cfg.Settings
	s.Models = rows
	a.cfg.Settings = &s
}

// ignoredKeys counts the configuration's keys the database does not hold.
func (a *App) ignoredKeys(keys []store.ImportKey) int {
	snap, n := a.tenancy.Snapshot(), 0
	for _, k := range keys {
		if _, ok := snap.Key([sha256.Size]byte(k.Hash), a.clock.Now()); !ok {
			n++
		}
	}
	return n
}

// newTenancy makes the watcher of the store's tenancy; its loads reach
// the worker's scopes at once.
func (a *App) newTenancy() *tenancy.Watcher {
	return tenancy.New(tenancySource{a}, tenancy.Config{Logger: a.log, OnLoad: func(s *tenancy.Snapshot) {
		if a.worker != nil {
			a.worker.TenantsChanged()
			if s.Models != nil {
				a.worker.ModelsChanged(s.Models)
			}
		}
	}})
}
