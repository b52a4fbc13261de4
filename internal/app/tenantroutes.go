package app

import (
	"context"
	"log/slog"

	"github.com/llmq/llmq/internal/config"
	"github.com/llmq/llmq/internal/tenantroutes"
	"github.com/llmq/llmq/internal/webhook"
	"github.com/llmq/llmq/store"
)

// buildTenantRoutes makes the webhook sender and the tenants' routes and
// secrets served from the database (migration 0031), which hand each
// load's secrets to the sender; startTenantRoutes starts them.
func (a *App) buildTenantRoutes(s *config.Config) (*webhook.Sender, *tenantroutes.Routes, error) {
	hooks, err := webhook.New(webhook.Config{AllowPrivate: s.Notifications.AllowPrivateWebhooks})
	if err != nil {
		return nil, nil, err
	}
	routes, err := tenantroutes.New(tenantroutes.Config{Source: store.NewTenantNotifications(a.store),
		OnSecrets: hooks.SetSecrets, Log: a.log})
	if err != nil {
		return nil, nil, err
	}
	return hooks, routes, nil
}

// startTenantRoutes imports the configuration's notifications.tenant_replies
// and webhook_secrets on the first start (after it the database is their
// source: the admin API changes them), then starts routes.
func (a *App) startTenantRoutes(routes *tenantroutes.Routes) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		n := a.cfg.Settings.Notifications
		imported, err := store.NewTenantNotifications(a.store).Import(ctx, n.TenantReplies, n.WebhookSecrets)
		if err != nil {
			return err
		}
		if imported && len(n.TenantReplies)+len(n.WebhookSecrets) > 0 {
			a.log.Info("notifications: imported the configuration's tenant routes and webhook secrets into the database, "+
				"which is their source from now on", slog.Int("routes", len(n.TenantReplies)), slog.Int("secrets", len(n.WebhookSecrets)))
		}
		return routes.Start(ctx)
	}
}
