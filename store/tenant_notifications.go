package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/llmq/llmq"
)

// TenantNotificationsChannel is the Postgres notification channel on
// which every change of tenant_notifications announces itself when it
// commits (migration 0031): every replica reloads its routes and secrets.
const TenantNotificationsChannel = "llmq_tenant_notifications"

// AnyTenantNotifications is the tenant of the row whose webhook secrets
// sign for every tenant without secrets of its own.
const AnyTenantNotifications = "*"

// TenantNotifications reads and changes the tenants' result routes and
// webhook signing secrets kept as data (docs/design/notifications.md,
// Tenant routes as data); every change writes its audit row, secrets
// shown by fingerprint only, in the same transaction.
type TenantNotifications struct{ s *Store }

// NewTenantNotifications returns the tenant routes and secrets of s.
func NewTenantNotifications(s *Store) *TenantNotifications { return &TenantNotifications{s: s} }

// TenantNotification is one tenant's row.
type TenantNotification struct {
	Tenant string
	// ReplyTo is the tenant's results topic or reply queue, Webhook its
	// https endpoint; "" for none.
	ReplyTo, Webhook string
	// Secrets are its webhook signing secrets, the newest first, the
	// previous one second while a rotation lasts.
	Secrets   []string
	Version   int64
	UpdatedAt time.Time
}

// Reply is the row's route as a job's.
func (t TenantNotification) Reply() llmq.Reply { return llmq.Reply{To: t.ReplyTo, Webhook: t.Webhook} }

// SecretFingerprint names a secret without showing it: the first 12 hex
// digits of its SHA-256.
func SecretFingerprint(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:6])
}

// auditView is what the audit log keeps of a row: its secrets by
// fingerprint.
func (t TenantNotification) auditView() any {
	fps := make([]string, len(t.Secrets))
	for i, s := range t.Secrets {
		fps[i] = SecretFingerprint(s)
	}
	return map[string]any{"reply_to": t.ReplyTo, "webhook": t.Webhook, "secrets": fps}
}

const tenantNotificationColumns = `tenant, reply_to, webhook, secrets, version, updated_at`

func scanTenantNotification(row pgx.CollectableRow) (TenantNotification, error) {
	var t TenantNotification
	err := row.Scan(&t.Tenant, &t.ReplyTo, &t.Webhook, &t.Secrets, &t.Version, &t.UpdatedAt)
	return t, err
}

// List returns every row, by tenant.
func (tn *TenantNotifications) List(ctx context.Context) ([]TenantNotification, error) {
	rows, err := tn.s.pool.Query(ctx, `SELECT `+tenantNotificationColumns+` FROM tenant_notifications ORDER BY tenant`)
	if err != nil {
		return nil, fmt.Errorf("store: list tenant notifications: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanTenantNotification)
	if err != nil {
		return nil, fmt.Errorf("store: list tenant notifications: %w", err)
	}
	return out, nil
}

// Get returns tenant's row; ErrTenancyNotFound when it has none.
func (tn *TenantNotifications) Get(ctx context.Context, tenant string) (TenantNotification, error) {
	t, err := queryOne(ctx, tn.s.pool, scanTenantNotification,
		`SELECT `+tenantNotificationColumns+` FROM tenant_notifications WHERE tenant = $1`, tenant)
	return t, tenancyErr("get tenant notifications", err)
}

// PutRoute sets tenant's route. With version 0 it creates the row
// (ErrTenancyExists when there is one); otherwise it changes the row if
// its version is still version (ErrVersionMismatch, ErrTenancyNotFound).
func (tn *TenantNotifications) PutRoute(ctx context.Context, actor, tenant string, route llmq.Reply, version int64) (TenantNotification, error) {
	return tn.change(ctx, actor, "put", tenant, func(old *TenantNotification, found bool) error {
		switch {
		case version == 0 && found:
			return ErrTenancyExists
		case version != 0 && !found:
			return ErrTenancyNotFound
		}
		old.ReplyTo, old.Webhook = route.To, route.Webhook
		return ifVersion(old.Version, version)
	})
}

// RotateSecret makes secret tenant's newest webhook secret and keeps the
// one it replaces as the previous, so receivers that know either accept
// the deliveries until EndRotation; a secret before that is dropped. A
// tenant without a row gets one.
func (tn *TenantNotifications) RotateSecret(ctx context.Context, actor, tenant, secret string) (TenantNotification, error) {
	return tn.change(ctx, actor, "rotate_secret", tenant, func(old *TenantNotification, _ bool) error {
		old.Secrets = append([]string{secret}, old.Secrets[:min(len(old.Secrets), 1)]...)
		return nil
	})
}

// EndRotation drops tenant's previous webhook secret: only the newest
// signs from then on.
func (tn *TenantNotifications) EndRotation(ctx context.Context, actor, tenant string) (TenantNotification, error) {
	return tn.change(ctx, actor, "end_rotation", tenant, func(old *TenantNotification, found bool) error {
		if !found {
			return ErrTenancyNotFound
		}
		old.Secrets = old.Secrets[:min(len(old.Secrets), 1)]
		return nil
	})
}

// change applies f to tenant's row (a zero row when there is none, found
// false) and writes it, its version raised, with its audit row, in one
// transaction holding the row.
func (tn *TenantNotifications) change(ctx context.Context, actor, action, tenant string,
	f func(row *TenantNotification, found bool) error) (TenantNotification, error) {
	var out TenantNotification
	err := pgx.BeginFunc(ctx, tn.s.pool, func(tx pgx.Tx) error {
		old, err := queryOne(ctx, tx, scanTenantNotification,
			`SELECT `+tenantNotificationColumns+` FROM tenant_notifications WHERE tenant = $1 FOR UPDATE`, tenant)
		found := err == nil
		if err != nil && !errors.Is(err, ErrTenancyNotFound) {
			return err
		}
		row := old
		row.Tenant, row.Secrets = tenant, slices.Clone(old.Secrets)
		if err := f(&row, found); err != nil {
			return err
		}
		now := tn.s.clk.Now()
		out, err = queryOne(ctx, tx, scanTenantNotification, `INSERT INTO tenant_notifications
			(tenant, reply_to, webhook, secrets, updated_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (tenant) DO UPDATE SET reply_to = $2, webhook = $3, secrets = $4, updated_at = $5,
				version = tenant_notifications.version + 1
			RETURNING `+tenantNotificationColumns, tenant, row.ReplyTo, row.Webhook, nonNil(row.Secrets), now)
		if err != nil {
			return err
		}
		var was any
		if found {
			was = old.auditView()
		}
		return audit(ctx, tx, now, actor, action, "tenant_notifications", tenant, was, out.auditView())
	})
	if err != nil {
		return TenantNotification{}, tenancyErr("change tenant notifications", err)
	}
	return out, nil
}

// nonNil is s, or an empty slice for nil (an empty text[], not NULL).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Delete deletes tenant's row if its version is still version (0:
// whatever it is): its jobs then take the deployment's route and its
// webhooks the secrets of AnyTenantNotifications.
func (tn *TenantNotifications) Delete(ctx context.Context, actor, tenant string, version int64) error {
	err := pgx.BeginFunc(ctx, tn.s.pool, func(tx pgx.Tx) error {
		old, err := queryOne(ctx, tx, scanTenantNotification,
			`SELECT `+tenantNotificationColumns+` FROM tenant_notifications WHERE tenant = $1 FOR UPDATE`, tenant)
		if err != nil {
			return err
		}
		if err := ifVersion(old.Version, version); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tenant_notifications WHERE tenant = $1`, tenant); err != nil {
			return err
		}
		return audit(ctx, tx, tn.s.clk.Now(), actor, "delete", "tenant_notifications", tenant, old.auditView(), nil)
	})
	return tenancyErr("delete tenant notifications", err)
}

// Import writes the configuration's tenant routes and webhook secrets
// into tenant_notifications when they were never imported (the first
// start with migration 0031), and reports whether it did; after it the
// database wins. Concurrent starts import once.
func (tn *TenantNotifications) Import(ctx context.Context, routes map[string]llmq.Reply, secrets map[string][]string) (bool, error) {
	var done bool
	err := pgx.BeginFunc(ctx, tn.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE tenant_notifications_imported IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		now := tn.s.clk.Now()
		tag, err := tx.Exec(ctx, `INSERT INTO tenant_notifications_imported (imported_at) VALUES ($1) ON CONFLICT DO NOTHING`, now)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		tenants := slices.Collect(maps.Keys(routes))
		for t := range secrets {
			if _, ok := routes[t]; !ok {
				tenants = append(tenants, t)
			}
		}
		slices.Sort(tenants)
		for _, t := range tenants {
			r := routes[t]
			if _, err := tx.Exec(ctx, `INSERT INTO tenant_notifications (tenant, reply_to, webhook, secrets, updated_at)
				VALUES ($1, $2, $3, $4, $5)`, t, r.To, r.Webhook, nonNil(secrets[t]), now); err != nil {
				return err
			}
		}
		done = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: import tenant notifications: %w", err)
	}
	return done, nil
}

// Listen calls listening once it listens on TenantNotificationsChannel,
// then changed at every change, until ctx ends or the connection fails.
func (tn *TenantNotifications) Listen(ctx context.Context, listening, changed func()) error {
	return tn.s.listen(ctx, TenantNotificationsChannel, listening, func(string) { changed() })
}
