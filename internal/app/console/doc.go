// Package console is llmq's web console, served by `llmq api` at /ui: an
// overview of the queue (jobs by state, each counted up to 10,000 and shown
// "10,000+" past it, queue depth, drain estimate,
// backpressure, dead letters of the last 24 hours, batches in flight), the
// jobs with filters and keyset paging, a job's request, result or error,
// model, tokens, cost and times (and its cancellation while queued), the
// dead letters grouped by reason with replay and purge, the provider
// batches with their cancellation, and the tenants' and projects' usage
// (GET /v1/usage).
//
// # No second path to the data
//
// The console reads and changes nothing itself. Each page calls the JSON
// API's own http.Handler in process, with the session's key in an
// Authorization header: the same routes, the same authentication, the same
// tenant scoping and the same checks as any client, and it renders the
// API's exported views (api.Job, api.Batch, dlq.View...). Every number on a
// page is one the API documents in its OpenAPI document. A tenant's key
// shows that tenant; an operator key shows every tenant, and the batches.
//
// # How it is built, and why
//
// Pages are server-rendered html/template, with htmx (2.0, vendored under
// static/ with its licence, embedded with go:embed) polling HTML fragments
// every Config.Refresh for live updates. Charts are inline SVG written by
// Go (charts.go). So `go build` alone builds it, nothing is fetched from a
// CDN or needs Node.js, it works offline, and no JSON-to-DOM code runs in
// the browser: what a page shows is what the server rendered from the API.
//
// # Sessions and forms
//
// Signing in posts an API key, which the console checks with GET /v1/me and
// keeps in a cookie sealed with AES-256-GCM (HttpOnly, SameSite=Strict,
// scoped to /ui, for Config.SessionTTL; Secure under TLS, behind a proxy
// that sends X-Forwarded-Proto: https, or always with Config.Secure): a
// script cannot read it and no page contains it. The sealing and CSRF keys derive from
// Config.Secret (LLMQ_CONSOLE_SECRET), or from a random secret per process.
// Every form carries a CSRF token, the HMAC of the session's id (of a
// nonce cookie for the sign-in form), and state-changing requests from
// another origin are refused by the browser's Sec-Fetch-Site and Origin
// headers too (http.CrossOriginProtection). Actions that lose or resend
// data (replay, purge, cancel a batch) open a confirm dialog rendered by
// the server first.
//
// Every answer carries a Content-Security-Policy that allows the console's
// own script and style files only (ContentSecurityPolicy: no inline script
// or style, no eval, no framing), with nosniff, no referrer and no-store
// on pages.
package console
