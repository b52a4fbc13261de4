// Package tenantroutes serves a replica the tenants' result routes and
// webhook signing secrets kept as data (store.TenantNotifications,
// migration 0031): a Routes answers the worker's TenantReply from an
// immutable snapshot swapped whole at every change announced on
// store.TenantNotificationsChannel, and every Period as a backstop, and
// hands each load's secrets to the webhook sender. It keeps serving its
// last good snapshot while the database is away
// (docs/design/notifications.md, Tenant routes as data).
package tenantroutes
