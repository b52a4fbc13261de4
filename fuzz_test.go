package llmq_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/llmq/llmq"
)

// FuzzDecode checks that Decode never panics, that it returns either a job
// or a *ValidationError with at least one field, and that an accepted job
// survives its own wire form and holds nothing Postgres would refuse.
// Run longer with: go test -run '^$' -fuzz FuzzDecode -fuzztime 60s .
func FuzzDecode(f *testing.F) {
	for _, tc := range malformed {
		if len(tc.msg) < 4096 {
			f.Add([]byte(tc.msg))
		}
	}
	for _, s := range []string{
		withBody(okBody),
		`{"id":"job-1","tenant":"acme","priority":"high","deadline":"2026-12-01T10:00:00Z","deferrable":true,` +
			`"fallback_models":["m2"],"metadata":{"k":"v"},"body":` + okBody + `}`,
		withBody(`{"model":"m","messages":[{"role":"user","content":"\ud83d\ude00 \\u0000 \"q\""}],"max_completion_tokens":7}`),
		withBody(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"<&>"}]}],"max_tokens":1e3}`),
		withBody(`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1e700}`),
		`{"body":{"model":"m","model":"n","messages":[{"role":"a"}]},"body":` + okBody + `}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := llmq.Decode(data, llmq.DecodeOptions{MaxMessageBytes: 1 << 16})
		if err != nil {
			var ve *llmq.ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 || j != nil {
				t.Fatalf("Decode(%q) = %v, %v: want a *ValidationError and no job", data, j, err)
			}
			return
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("decoded job does not validate: %v", err)
		}
		if j.ID == "" || j.Tenant == "" || !j.Priority.Valid() || j.Model() == "" {
			t.Fatalf("decoded job lacks defaults: %+v", j)
		}
		// Read as raw values: the body is passed on as sent, and a number
		// beyond float64 (1e700) is the provider's to refuse, not Decode's.
		var body map[string]json.RawMessage
		if err := json.Unmarshal(j.Body, &body); err != nil {
			t.Fatalf("body is not an object: %v", err)
		}
		enc, err := j.Encode()
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		back, err := llmq.Decode(enc, llmq.DecodeOptions{MaxMessageBytes: -1})
		if err != nil {
			t.Fatalf("Decode(Encode(job)) failed: %v\nmessage: %q\nencoded: %q", err, data, enc)
		}
		requireSameJob(t, j, back)
		if _, err := j.WithModel("fallback"); err != nil {
			t.Fatalf("WithModel: %v", err)
		}
		// For a tenant (the API's tenant keys): the same job, of that
		// tenant when it names none, as Decode returned it.
		k, err := llmq.Decode(data, llmq.DecodeOptions{MaxMessageBytes: 1 << 16, Tenant: "acme"})
		if err != nil || !k.Validated() || (k.Tenant != j.Tenant && (j.Tenant != llmq.DefaultTenant || k.Tenant != "acme")) {
			t.Fatalf("Decode(%q) for tenant acme = %+v, %v; without: tenant %q", data, k, err, j.Tenant)
		}
	})
}
