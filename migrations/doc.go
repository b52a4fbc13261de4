// Package migrations holds llmq's Postgres schema as numbered SQL files
// embedded in the binary, and the runner that applies them.
//
// Files are named NNNN_name.up.sql and NNNN_name.down.sql; every up file has
// a down file. To change the schema, add the next number; never edit a
// migration that has shipped.
//
// The runner takes a session-level pg_advisory_lock (keyed on the current
// schema) before it reads or writes the schema_migrations table, so two
// processes may run [Up] at once: the second waits, then finds nothing to do.
// Each migration runs in its own transaction together with the insert (or
// delete) of its row in schema_migrations, so a failed migration leaves no
// trace. [Up] with a URL also creates the database it names when missing.
package migrations
