package api

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/producer"
	"github.com/llmq/llmq/store"
)

// noStore is a JobStore that answers nothing; the test below never reaches
// it.
type noStore struct{}

func (noStore) Get(context.Context, string, string) (*store.JobRecord, error) {
	return nil, store.ErrNotFound
}
func (noStore) List(context.Context, store.ListOptions) ([]*store.JobRecord, string, error) {
	return nil, "", nil
}
func (noStore) Cancel(context.Context, string, string) (*store.JobRecord, error) {
	return nil, store.ErrNotFound
}
func (noStore) CountByStatus(context.Context, string, int64) (map[llmq.Status]int64, error) {
	return nil, nil
}
func (noStore) Ping(context.Context) error                                        { return nil }
func (noStore) Attempts(context.Context, string, string) ([]store.Attempt, error) { return nil, nil }
func (noStore) ModelStats(context.Context, string, time.Time) ([]store.ModelCalls, error) {
	return nil, nil
}

func (noStore) JobRates(context.Context, string, time.Time) ([]store.JobMinute, error) {
	return nil, nil
}

// TestKeysByHash: the API keeps only the hashes of its keys, tenants' and
// operators', and looks a key up by its hash.
func TestKeysByHash(t *testing.T) {
	t.Parallel()
	a, err := New(Config{Producer: &producer.Producer{}, Store: noStore{}, Keys: map[string]string{"key-acme-0123": "acme"},
		OperatorKeys: []OperatorKey{{Key: "key-operator-0123"}, {Name: "ops-alice", Key: "key-operator-4567"}}})
	require.NoError(t, err)
	require.Nil(t, a.cfg.Keys, "no key is kept")
	require.Nil(t, a.cfg.OperatorKeys, "no key is kept")
	require.Equal(t, map[[sha256.Size]byte]caller{
		sha256.Sum256([]byte("key-acme-0123")):     {tenant: "acme"},
		sha256.Sum256([]byte("key-operator-0123")): {operator: true, name: OperatorName(OperatorKey{Key: "key-operator-0123"})},
		sha256.Sum256([]byte("key-operator-4567")): {operator: true, name: "operator ops-alice"},
	}, a.keys)
	require.Regexp(t, `^operator [0-9a-f]{8}$`, OperatorName(OperatorKey{Key: "key-operator-0123"}), "an unnamed operator key's name shows no key")
	for key, want := range map[string]scope{"key-acme-0123": {tenant: "acme"}, "key-operator-0123": {operator: true, name: OperatorName(OperatorKey{Key: "key-operator-0123"})},
		"key-operator-4567": {operator: true, name: "operator ops-alice"}} {
		var got scope
		h := a.authed(func(_ http.ResponseWriter, r *http.Request) { got, _ = scopeOf(r) })
		req := httptest.NewRequest(http.MethodGet, "/v1/jobs", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		h.ServeHTTP(httptest.NewRecorder(), req)
		require.Equal(t, want, got)
	}
}
