package demo_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmq/llmq/internal/app/demo"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}

// testDatabase returns the URL of a fresh database name on the local
// Postgres (the demo creates and migrates it) and drops it after the test.
func testDatabase(t *testing.T) string {
	t.Helper()
	base := os.Getenv("LLMQ_TEST_POSTGRES")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432"
	}
	name := "llmq_demo_test_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base+"/postgres?sslmode=disable")
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	})
	return base + "/" + name + "?sslmode=disable"
}

// TestDemoRun runs the demo in-process with 40 jobs on an embedded Kafka
// broker and checks the summary exactly.
func TestDemoRun(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sum, err := demo.Run(ctx, demo.Config{
		Jobs: 40, DatabaseURL: testDatabase(t), Listen: "127.0.0.1:0", Out: &out, Timeout: 75 * time.Second,
	})
	require.NoError(t, err, out.String())
	t.Log("\n" + out.String())

	require.Equal(t, 40, sum.Jobs)
	require.Equal(t, demo.MalformedMin, sum.Malformed)
	require.Equal(t, 40, sum.Succeeded)
	require.Equal(t, 40/demo.DeferrableEvery, sum.ViaBatch, "every deferrable job goes through the Batch API")
	require.Equal(t, 40/demo.DeferrableEvery, int(sum.BatchLines))
	require.Equal(t, 0, sum.Failed)
	require.Equal(t, 0, sum.DeadLettered)
	require.Equal(t, 0, sum.Expired)
	require.Equal(t, demo.MalformedMin, sum.Poison)
	require.True(t, sum.Clean())
	// Every live job was admitted once, plus once per injected fault or
	// 429 it retried.
	require.Equal(t, int64(40-40/demo.DeferrableEvery)+sum.Faults, sum.Requests)
	require.Equal(t, sum.Faults+sum.RateLimited, sum.Retries)
	require.Positive(t, sum.P50)
	require.GreaterOrEqual(t, sum.P99, sum.P50)
	require.NotEmpty(t, sum.ExampleJobID)

	text := out.String()
	require.Contains(t, text, "40 jobs through POST /v1/jobs")
	require.Contains(t, text, "result        clean")
	require.Contains(t, text, "curl -s -H 'Authorization: Bearer "+demo.APIKeyDefault+"' "+sum.APIURL+"/v1/jobs/"+sum.ExampleJobID)
	require.Contains(t, text, "console    "+sum.APIURL+"/ui (sign in with the operator key "+demo.OperatorKeyDefault+")")
}

// TestSummaryNamesTheConsole: with --keep-running the summary ends with
// the console's address and the key to sign in with.
func TestSummaryNamesTheConsole(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	demo.Summary{APIURL: "http://127.0.0.1:8080", APIKey: demo.APIKeyDefault, ExampleJobID: "j1"}.Print(&out, true)
	require.Contains(t, out.String(), "the web console: http://127.0.0.1:8080/ui (sign in with the operator key "+demo.OperatorKeyDefault+")")
	out.Reset()
	demo.Summary{APIURL: "http://127.0.0.1:8080", APIKey: demo.APIKeyDefault, ExampleJobID: "j1"}.Print(&out, false)
	require.NotContains(t, out.String(), "/ui")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := demo.Run(context.Background(), demo.Config{Jobs: -1})
	require.ErrorIs(t, err, demo.ErrInvalidConfig)
	_, err = demo.Run(context.Background(), demo.Config{RPM: -5})
	require.ErrorIs(t, err, demo.ErrInvalidConfig)
}

// TestSummaryQuotaIncludesTheInitialAllowance: a run shorter than a minute
// averages above the quota on the provider's initial allowance; the summary
// says so and gives the share of what the provider allowed in the run.
func TestSummaryQuotaIncludesTheInitialAllowance(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	demo.Summary{Elapsed: 13 * time.Second, RPM: 600, TPM: 150000, RPMUsed: 833, TPMUsed: 277000, Retries: 1}.Print(&out, false)
	require.Contains(t, out.String(), "\n  quota used    25% of the requests and 33% of the tokens the provider allowed in the run "+
		"(its initial allowance, a minute of quota, and the refill over 13s)\n"+
		"                averaged over the run, 833 of 600 RPM and 277.0k of 150.0k TPM: above the quota, as a run shorter than a minute can be on the initial allowance\n")
	require.Contains(t, out.String(), "; 1 retry\n")
}
