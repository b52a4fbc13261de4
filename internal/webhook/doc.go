// Package webhook posts llmq's result events to the webhooks that tenants
// and jobs name, signed per the Standard Webhooks specification
// (webhook-id, webhook-timestamp, webhook-signature: HMAC-SHA256 with the
// tenant's secret, both secrets while one is rotated), with the
// specification's own library (github.com/standard-webhooks/standard-webhooks).
//
// A job names its webhook, so the sender is hardened against server-side
// request forgery: it follows no redirect, uses no proxy, and refuses at
// dial time every address that is loopback, private, link-local,
// multicast or unspecified, whatever the name resolved to, unless
// Config.AllowPrivate says otherwise (docs/design/notifications.md).
package webhook
