package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/store/storetest"
)

// TestStatusNamesTheTenant: a job asked for without its tenant, when
// another tenant has it, gets the command that shows it; an id no tenant
// has gets the rule of scoping.
func TestStatusNamesTheTenant(t *testing.T) {
	b := setupCLI(t)
	b.job(t, "acme", "hello-1")
	_, err := runLLMQ(t, "status", "hello-1")
	require.EqualError(t, err, `no job "hello-1" of tenant "default"; tenant "acme" has one: llmq status acme/hello-1`)
	out, err := runLLMQ(t, "status", "acme/hello-1")
	require.NoError(t, err)
	require.Contains(t, out, "hello-1")
	_, err = runLLMQ(t, "status", "nosuch")
	require.EqualError(t, err, `no job "nosuch" of tenant "default" (job ids are scoped by tenant: give tenant/id or --tenant)`)
	_, err = runLLMQ(t, "status", "--tenant", "default", "hello-1")
	require.EqualError(t, err, `no job "hello-1" of tenant "default"; tenant "acme" has one: llmq status acme/hello-1`)
}

// TestReadOnlyCommandOnAMissingDatabase: a read-only command on a database
// that does not exist says to run migrate, and creates nothing.
func TestReadOnlyCommandOnAMissingDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("Postgres")
	}
	url, _ := storetest.MissingDB(t)
	t.Setenv(config.EnvDatabaseURL, url)
	t.Setenv(config.EnvConfig, "")
	name, _, _ := strings.Cut(url[strings.LastIndex(url, "/")+1:], "?")
	for _, args := range [][]string{{"status", "x"}, {"jobs", "ls"}, {"dlq", "ls"}, {"usage"}} {
		_, err := runLLMQ(t, args...)
		require.EqualError(t, err, `database "`+name+`" does not exist: run llmq migrate`, args)
	}
}

// TestArgumentErrorsShowTheUsage: a command given the wrong arguments
// says what it takes.
func TestArgumentErrorsShowTheUsage(t *testing.T) {
	var stderr bytes.Buffer
	code := execute(context.Background(), []string{"status"}, strings.NewReader(""), &bytes.Buffer{}, &stderr)
	require.Equal(t, 1, code)
	require.Equal(t, "llmq: accepts 1 arg(s), received 0\nusage: llmq status [tenant/]<job-id> [flags]\n", stderr.String())
}

// TestVersion: --version prints the module's version and commit.
func TestVersion(t *testing.T) {
	var stdout bytes.Buffer
	code := execute(context.Background(), []string{"--version"}, strings.NewReader(""), &stdout, &bytes.Buffer{})
	require.Equal(t, 0, code)
	require.Regexp(t, `^llmq version \S+`, stdout.String())
}

// TestUsageUnknownTenant: usage of a tenant that neither the configuration
// nor Postgres knows says so instead of printing zeros.
func TestUsageUnknownTenant(t *testing.T) {
	b := setupCLI(t)
	b.job(t, "acme", "j1")
	_, err := runLLMQ(t, "usage", "--tenant", "nosuch")
	require.EqualError(t, err, `no tenant "nosuch": the configuration names none and no job of it is in Postgres`)
	out, err := runLLMQ(t, "usage", "--tenant", "acme")
	require.NoError(t, err)
	require.Contains(t, out, "TENANT")
}
