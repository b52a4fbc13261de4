package api

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

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
func (noStore) Ping(context.Context) error { return nil }

// TestKeysByHash: the API keeps only the hashes of its keys and looks a
// key up by its hash.
func TestKeysByHash(t *testing.T) {
	t.Parallel()
	a, err := New(Config{Producer: &producer.Producer{}, Store: noStore{}, Keys: map[string]string{"key-acme-0123": "acme"}})
	require.NoError(t, err)
	require.Nil(t, a.cfg.Keys, "no key is kept")
	require.Equal(t, map[[sha256.Size]byte]string{sha256.Sum256([]byte("key-acme-0123")): "acme"}, a.keys)
	var tenant string
	h := a.authed(func(_ http.ResponseWriter, r *http.Request) { tenant = TenantOf(r) })
	req := httptest.NewRequest(http.MethodGet, "/v1/jobs", nil)
	req.Header.Set("Authorization", "Bearer key-acme-0123")
	h.ServeHTTP(httptest.NewRecorder(), req)
	require.Equal(t, "acme", tenant)
}
