package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// The models kept as data (migration 0030, docs/design/tenants.md#models-as-data):
// each model's limits, context window, prices and fallbacks, read by every
// replica from the tenancy's snapshot like the tenants.

// ModelRow is a model as kept.
type ModelRow struct {
	Name      string
	Model     llmq.Model
	Version   int64
	UpdatedAt time.Time
}

// ModelsError reports a change that would leave the models inconsistent:
// a setting out of range, or a fallback naming a model the table does not
// hold. Each of Errs names its setting ("models.gpt-4o.fallbacks[0]: ...").
type ModelsError struct{ Errs []error }

func (e *ModelsError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return "store: invalid models: " + strings.Join(msgs, "; ")
}

func (e *ModelsError) Unwrap() []error { return e.Errs }

// AnyModel returns t checking a model's fallbacks as a catalog that allows
// any model name does (allow_any_model) when allow: they may then name
// models the table does not hold.
func (t *Tenancy) AnyModel(allow bool) *Tenancy {
	c := *t
	c.anyModel = allow
	return &c
}

// ModelMap is the models of r by name.
func (r *TenancyRows) ModelMap() map[string]llmq.Model {
	out := make(map[string]llmq.Model, len(r.Models))
	for _, m := range r.Models {
		out[m.Name] = m.Model
	}
	return out
}

const modelCols = `name, model, version, updated_at`

func scanModel(r pgx.CollectableRow) (ModelRow, error) {
	var m ModelRow
	var model []byte
	if err := r.Scan(&m.Name, &model, &m.Version, &m.UpdatedAt); err != nil {
		return m, err
	}
	return m, json.Unmarshal(model, &m.Model)
}

// loadModels reads every model and whether they were imported.
func loadModels(ctx context.Context, tx pgx.Tx) ([]ModelRow, bool, error) {
	rows, err := tx.Query(ctx, `SELECT `+modelCols+` FROM tenancy_models ORDER BY name`)
	if err != nil {
		return nil, false, err
	}
	models, err := pgx.CollectRows(rows, scanModel)
	if err != nil {
		return nil, false, err
	}
	var imported bool
	err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM tenancy_models_imported) OR EXISTS (SELECT FROM tenancy_models)`).Scan(&imported)
	return models, imported, err
}

// ImportModels writes models into the table when it was never written
// (the first start after migration 0030), and reports whether it did;
// after it the database wins. Concurrent starts import once.
func (t *Tenancy) ImportModels(ctx context.Context, models map[string]llmq.Model) (bool, error) {
	var done bool
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE tenancy_models_imported IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		_, imported, err := loadModels(ctx, tx)
		if err != nil || imported {
			return err
		}
		now := t.s.clk.Now()
		if err := markModelsImported(ctx, tx, now); err != nil {
			return err
		}
		for _, name := range slices.Sorted(maps.Keys(models)) {
			if err := writeModel(ctx, tx, now, "import", "import", ModelRow{Name: name, Model: models[name]}, nil); err != nil {
				return err
			}
		}
		done = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: import models: %w", err)
	}
	return done, nil
}

func markModelsImported(ctx context.Context, tx pgx.Tx, now time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO tenancy_models_imported (imported_at) VALUES ($1) ON CONFLICT DO NOTHING`, now)
	return err
}

// writeModel creates or replaces a model's row (old nil: it is new) and
// writes its audit row.
func writeModel(ctx context.Context, tx pgx.Tx, now time.Time, actor, action string, row ModelRow, old *llmq.Model) error {
	model, err := json.Marshal(row.Model)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO tenancy_models (name, model, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET model = EXCLUDED.model, version = tenancy_models.version + 1, updated_at = EXCLUDED.updated_at`,
		row.Name, model, now); err != nil {
		return err
	}
	if old == nil {
		return audit(ctx, tx, now, actor, action, "model", row.Name, nil, row.Model)
	}
	return audit(ctx, tx, now, actor, action, "model", row.Name, *old, row.Model)
}

// Model returns one model's row.
func (t *Tenancy) Model(ctx context.Context, name string) (ModelRow, error) {
	row, err := queryOne(ctx, t.s.pool, scanModel, `SELECT `+modelCols+` FROM tenancy_models WHERE name = $1`, name)
	return row, tenancyErr("model", err)
}

// lockModels locks the models against other writers of them and returns
// them by name: a change is checked against the models it leaves.
func lockModels(ctx context.Context, tx pgx.Tx) (map[string]ModelRow, error) {
	if _, err := tx.Exec(ctx, `LOCK TABLE tenancy_models IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return nil, err
	}
	models, _, err := loadModels(ctx, tx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ModelRow, len(models))
	for _, m := range models {
		out[m.Name] = m
	}
	return out, nil
}

// checkModels returns a *ModelsError when models are not a consistent
// catalog.
func (t *Tenancy) checkModels(models map[string]llmq.Model) error {
	if errs := llmq.ValidateModels("models", models, t.anyModel); len(errs) > 0 {
		return &ModelsError{Errs: errs}
	}
	return nil
}

// PutModel creates a model (version -1: it must not exist) or replaces it
// if its version is still version (0: whatever it is, or create it). The
// models it leaves must be consistent: *ModelsError.
func (t *Tenancy) PutModel(ctx context.Context, actor string, row ModelRow, version int64) (ModelRow, error) {
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		have, err := lockModels(ctx, tx)
		if err != nil {
			return err
		}
		old, found := have[row.Name]
		switch {
		case version == -1 && found:
			return ErrTenancyExists
		case version > 0 && !found:
			return ErrTenancyNotFound
		case found:
			if err := ifVersion(old.Version, version); err != nil {
				return err
			}
		}
		after := modelMap(have)
		after[row.Name] = row.Model
		if err := t.checkModels(after); err != nil {
			return err
		}
		now := t.s.clk.Now()
		if err := markModelsImported(ctx, tx, now); err != nil {
			return err
		}
		if found {
			return writeModel(ctx, tx, now, actor, "update", row, &old.Model)
		}
		return writeModel(ctx, tx, now, actor, "create", row, nil)
	})
	if err != nil {
		return ModelRow{}, modelErr("put model", err)
	}
	return t.Model(ctx, row.Name)
}

// DeleteModel deletes a model if its version is still version (0:
// whatever it is) and no other model falls back to it: *ModelsError.
func (t *Tenancy) DeleteModel(ctx context.Context, actor, name string, version int64) error {
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		have, err := lockModels(ctx, tx)
		if err != nil {
			return err
		}
		old, found := have[name]
		if !found {
			return ErrTenancyNotFound
		}
		if err := ifVersion(old.Version, version); err != nil {
			return err
		}
		after := modelMap(have)
		delete(after, name)
		if err := t.checkModels(after); err != nil {
			return err
		}
		now := t.s.clk.Now()
		if _, err := tx.Exec(ctx, `DELETE FROM tenancy_models WHERE name = $1`, name); err != nil {
			return err
		}
		if err := markModelsImported(ctx, tx, now); err != nil {
			return err
		}
		return audit(ctx, tx, now, actor, "delete", "model", name, old.Model, nil)
	})
	return modelErr("delete model", err)
}

func modelMap(rows map[string]ModelRow) map[string]llmq.Model {
	out := make(map[string]llmq.Model, len(rows))
	for n, r := range rows {
		out[n] = r.Model
	}
	return out
}

// modelErr is tenancyErr, keeping a *ModelsError as it is.
func modelErr(op string, err error) error {
	if _, ok := errors.AsType[*ModelsError](err); ok {
		return err
	}
	return tenancyErr(op, err)
}

// diffModels are the changes that make have match want, in name order.
func diffModels(have map[string]ModelRow, want map[string]llmq.Model) []Change {
	var out []Change
	for _, n := range unionKeys(have, want) {
		h, hok := have[n]
		w, wok := want[n]
		switch {
		case !wok:
			out = append(out, Change{Action: "delete", Kind: "model", Name: n, Old: h.Model})
		case !hok:
			out = append(out, Change{Action: "create", Kind: "model", Name: n, New: w})
		case !reflect.DeepEqual(modelNorm(h.Model), modelNorm(w)):
			out = append(out, Change{Action: "update", Kind: "model", Name: n, Old: h.Model, New: w})
		}
	}
	return out
}

// modelNorm is m with an empty list of fallbacks as none, as its JSON
// keeps it.
func modelNorm(m llmq.Model) llmq.Model {
	if len(m.Fallbacks) == 0 {
		m.Fallbacks = nil
	}
	return m
}

// applyModelChange makes one change of Apply's to the models.
func applyModelChange(ctx context.Context, tx pgx.Tx, now time.Time, actor string, c Change) error {
	if c.Action == "delete" {
		if _, err := tx.Exec(ctx, `DELETE FROM tenancy_models WHERE name = $1`, c.Name); err != nil {
			return err
		}
		return audit(ctx, tx, now, actor, "apply", "model", c.Name, c.Old, nil)
	}
	var old *llmq.Model
	if m, ok := c.Old.(llmq.Model); ok {
		old = &m
	}
	return writeModel(ctx, tx, now, actor, "apply", ModelRow{Name: c.Name, Model: c.New.(llmq.Model)}, old)
}
