package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
	"github.com/llmq/llmq/store/storetest"
)

// TestModelsAsRows: the first import writes the configuration's models
// once; a change names the version it read; a fallback naming no model,
// or the removal of a model another falls back to, is refused and
// changes nothing; every change is audited; Apply diffs and makes the
// models match, leaving them alone when the file has none.
func TestModelsAsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tc := store.New(storetest.NewPool(t)).Tenancy()
	done, err := tc.ImportModels(ctx, map[string]llmq.Model{"big": {RPM: 60, TPM: 6000, Fallbacks: []string{"small"}}, "small": {RPM: 600}})
	require.NoError(t, err)
	require.True(t, done)
	done, err = tc.ImportModels(ctx, map[string]llmq.Model{"other": {}})
	require.NoError(t, err)
	require.False(t, done, "imported once: the database wins")
	rows, err := tc.Load(ctx)
	require.NoError(t, err)
	require.True(t, rows.ModelsImported)
	require.Equal(t, map[string]llmq.Model{"big": {RPM: 60, TPM: 6000, Fallbacks: []string{"small"}}, "small": {RPM: 600}}, rows.ModelMap())

	big, err := tc.Model(ctx, "big")
	require.NoError(t, err)
	big.Model.TPM = 9000
	_, err = tc.PutModel(ctx, "operator ops", big, big.Version+1)
	require.ErrorIs(t, err, store.ErrVersionMismatch)
	updated, err := tc.PutModel(ctx, "operator ops", big, big.Version)
	require.NoError(t, err)
	require.Equal(t, big.Version+1, updated.Version)
	require.InDelta(t, 9000, updated.Model.TPM, 0)

	_, err = tc.PutModel(ctx, "operator ops", store.ModelRow{Name: "new", Model: llmq.Model{Fallbacks: []string{"nope"}}}, -1)
	me, ok := errors.AsType[*store.ModelsError](err)
	require.True(t, ok, "%v", err)
	require.ErrorIs(t, me, llmq.ErrUnknownModel)
	require.Contains(t, err.Error(), `models.new.fallbacks[0]: "nope" is not in models`)
	_, err = tc.PutModel(ctx, "operator ops", store.ModelRow{Name: "neg", Model: llmq.Model{RPM: -1}}, -1)
	require.ErrorContains(t, err, "models.neg.rpm")
	_, err = tc.PutModel(ctx, "operator ops", store.ModelRow{Name: "small"}, -1)
	require.ErrorIs(t, err, store.ErrTenancyExists)
	err = tc.DeleteModel(ctx, "operator ops", "small", 0)
	require.ErrorContains(t, err, `models.big.fallbacks[0]: "small" is not in models`)
	_, err = tc.AnyModel(true).PutModel(ctx, "operator ops", store.ModelRow{Name: "open", Model: llmq.Model{Fallbacks: []string{"elsewhere"}}}, -1)
	require.NoError(t, err, "allow_any_model: a fallback may name any model")

	rows, err = tc.Load(ctx)
	require.NoError(t, err)
	require.Len(t, rows.Models, 3, "the refused changes changed nothing")
	audit, err := tc.Audit(ctx, 0, 2)
	require.NoError(t, err)
	require.Equal(t, "create", audit[0].Action)
	require.Equal(t, "open", audit[0].Name)
	require.Equal(t, "update", audit[1].Action)
	require.Equal(t, "operator ops", audit[1].Actor)
	require.JSONEq(t, `{"rpm":60,"tpm":6000,"fallbacks":["small"]}`, string(audit[1].Old))
	require.JSONEq(t, `{"rpm":60,"tpm":9000,"fallbacks":["small"]}`, string(audit[1].New))

	file := store.ApplyFile{Tenants: llmq.Tenants{}, Models: map[string]llmq.Model{"big": {RPM: 60, TPM: 9000}, "tiny": {RPM: 1}}}
	changes, err := tc.Apply(ctx, "cli me", file, true)
	require.NoError(t, err)
	var got []string
	for _, c := range changes {
		got = append(got, c.Action+" "+c.Kind+" "+c.Name)
	}
	require.Equal(t, []string{"update model big", "delete model open", "delete model small", "create model tiny"}, got)
	_, err = tc.Apply(ctx, "cli me", file, false)
	require.NoError(t, err)
	rows, err = tc.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, file.Models, rows.ModelMap())
	_, err = tc.Apply(ctx, "cli me", store.ApplyFile{Tenants: llmq.Tenants{}, Models: map[string]llmq.Model{"a": {Fallbacks: []string{"b"}}}}, false)
	require.ErrorIs(t, err, llmq.ErrUnknownModel)
	changes, err = tc.Apply(ctx, "cli me", store.ApplyFile{Tenants: llmq.Tenants{}}, false)
	require.NoError(t, err)
	require.Empty(t, changes, "a file without models leaves them")
	rows, err = tc.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, file.Models, rows.ModelMap())
}
