package app

import (
	"context"
	"log/slog"

	"github.com/llmq/llmq/internal/tenantroutes"
	"github.com/llmq/llmq/internal/webhook"
	"github.com/llmq/llmq/store"
)

// tenantRouting is what a process serves of the tenants' routes and
// webhook secrets kept as data (migration 0031): the routes the worker's
// ingest and the producer give jobs that name none, and the webhook
// sender each load hands the secrets to.
type tenantRouting struct {
	hooks  *webhook.Sender
	routes *tenantroutes.Routes
}

// tenantRoutes makes the process's tenant routing on first use (the
// worker and the producer share it) and adds the part that starts it.
func (a *App) tenantRoutes() (*tenantRouting, error) {
	if a.routing != nil {
		return a.routing, nil
	}
	s := a.cfg.Settings
	hooks, err := webhook.New(webhook.Config{AllowPrivate: s.Notifications.AllowPrivateWebhooks})
	if err != nil {
		return nil, err
	}
	routes, err := tenantroutes.New(tenantroutes.Config{Source: store.NewTenantNotifications(a.store),
		OnSecrets: hooks.SetSecrets, Log: a.log})
	if err != nil {
		return nil, err
	}
	a.routing = &tenantRouting{hooks: hooks, routes: routes}
	a.parts.add("tenant routes", a.waitingForDatabase("tenant routes", a.startTenantRoutes(routes)), routes.Stop, stopTimeout)
	return a.routing, nil
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
