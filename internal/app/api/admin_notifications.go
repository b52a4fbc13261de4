package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// TenantNotificationStore is what the admin API reads and changes of the
// tenants' result routes and webhook secrets; a
// *store.TenantNotifications is one.
type TenantNotificationStore interface {
	List(ctx context.Context) ([]store.TenantNotification, error)
	Get(ctx context.Context, tenant string) (store.TenantNotification, error)
	PutRoute(ctx context.Context, actor, tenant string, route llmq.Reply, version int64) (store.TenantNotification, error)
	RotateSecret(ctx context.Context, actor, tenant, secret string) (store.TenantNotification, error)
	EndRotation(ctx context.Context, actor, tenant string) (store.TenantNotification, error)
	Delete(ctx context.Context, actor, tenant string, version int64) error
}

// tenantNotifications serves the tenants' result routes and webhook
// secrets under /v1/admin (operator keys only).
type tenantNotifications struct {
	replies
	store TenantNotificationStore
}

// AdminTenantNotifications is a tenant's result route and webhook
// secrets as the admin API shows them: the secrets by fingerprint only.
type AdminTenantNotifications struct {
	Tenant    string        `json:"tenant"`
	ReplyTo   string        `json:"reply_to"`
	Webhook   string        `json:"webhook"`
	Secrets   []AdminSecret `json:"secrets"`
	Version   int64         `json:"version"`
	UpdatedAt time.Time     `json:"updated_at"`
}

// AdminSecret names a webhook secret without showing it.
type AdminSecret struct {
	// Fingerprint is the first 12 hex digits of the secret's SHA-256.
	Fingerprint string `json:"fingerprint"`
	// Role is "current" (the newest) or "previous" (while rotating).
	Role string `json:"role"`
}

// AdminNewSecret answers a rotation: the new secret, shown this once.
type AdminNewSecret struct {
	Secret        string                   `json:"secret"`
	Notifications AdminTenantNotifications `json:"notifications"`
}

func adminTenantNotifications(t store.TenantNotification) AdminTenantNotifications {
	out := AdminTenantNotifications{Tenant: t.Tenant, ReplyTo: t.ReplyTo, Webhook: t.Webhook,
		Secrets: make([]AdminSecret, len(t.Secrets)), Version: t.Version, UpdatedAt: t.UpdatedAt}
	for i, s := range t.Secrets {
		out.Secrets[i] = AdminSecret{Fingerprint: store.SecretFingerprint(s), Role: "current"}
		if i > 0 {
			out.Secrets[i].Role = "previous"
		}
	}
	return out
}

// notificationsTenant reads the path's tenant: an id, or "*" (the secrets
// of every tenant without its own).
func notificationsTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	t := r.PathValue("tenant")
	return t, t == store.AnyTenantNotifications || validName(w, "tenant", t)
}

// writeTenantNotifications answers with t and its ETag.
func writeTenantNotifications(w http.ResponseWriter, status int, t store.TenantNotification) {
	w.Header().Set("ETag", etag(t.Version))
	writeJSON(w, status, adminTenantNotifications(t))
}

// tenantNotificationsError answers a store error of these endpoints.
func (tn *tenantNotifications) tenantNotificationsError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, store.ErrTenancyNotFound):
		writeError(w, http.StatusNotFound, Error{Code: CodeNotFound, Message: "the tenant has no notification settings"})
	case errors.Is(err, store.ErrVersionMismatch):
		writeError(w, http.StatusPreconditionFailed, Error{Code: CodePreconditionFailed, Field: "If-Match",
			Message: "the tenant's notification settings changed since the version you read: GET them again"})
	case errors.Is(err, store.ErrTenancyExists):
		writeError(w, http.StatusConflict, Error{Code: CodeConflict, Field: "If-Match",
			Message: "the tenant has notification settings: send If-Match with their ETag to change them"})
	default:
		tn.internalError(w, r, err)
	}
}

// listTenantNotifications: GET /v1/admin/notifications.
func (tn *tenantNotifications) listTenantNotifications(w http.ResponseWriter, r *http.Request) {
	rows, err := tn.store.List(r.Context())
	if err != nil {
		tn.internalError(w, r, err)
		return
	}
	out := make([]AdminTenantNotifications, len(rows))
	for i, t := range rows {
		out[i] = adminTenantNotifications(t)
	}
	writeJSON(w, http.StatusOK, struct {
		Data []AdminTenantNotifications `json:"data"`
	}{out})
}

// getTenantNotifications: GET /v1/admin/tenants/{tenant}/notifications.
func (tn *tenantNotifications) getTenantNotifications(w http.ResponseWriter, r *http.Request) {
	tenant, ok := notificationsTenant(w, r)
	if !ok {
		return
	}
	t, err := tn.store.Get(r.Context(), tenant)
	if err != nil {
		tn.tenantNotificationsError(w, r, err)
		return
	}
	writeTenantNotifications(w, http.StatusOK, t)
}

// putTenantNotifications: PUT /v1/admin/tenants/{tenant}/notifications.
// Without If-Match it creates the tenant's row (409 when there is one),
// with it it changes the route of the version it read.
func (tn *tenantNotifications) putTenantNotifications(w http.ResponseWriter, r *http.Request) {
	tenant, ok := notificationsTenant(w, r)
	if !ok {
		return
	}
	var version int64
	if r.Header.Get("If-Match") != "" {
		if version, ok = ifMatch(w, r); !ok {
			return
		}
	}
	route, ok := readRoute(w, r, tenant)
	if !ok {
		return
	}
	t, err := tn.store.PutRoute(r.Context(), actor(r), tenant, route, version)
	if err != nil {
		tn.tenantNotificationsError(w, r, err)
		return
	}
	status := http.StatusOK
	if version == 0 {
		status = http.StatusCreated
	}
	writeTenantNotifications(w, status, t)
}

// readRoute decodes and checks a route body; every error names its
// field.
func readRoute(w http.ResponseWriter, r *http.Request, tenant string) (llmq.Reply, bool) {
	var b struct {
		ReplyTo string `json:"reply_to"`
		Webhook string `json:"webhook"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		e := Error{Code: llmq.CodeInvalidJSON, Message: "the body is not a route: " + err.Error()}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			e = Error{Code: llmq.CodeInvalidType, Field: te.Field, Message: fmt.Sprintf("must be of type %s", te.Type)}
		} else if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			e = Error{Code: llmq.CodeInvalidValue, Field: strings.Trim(f, `"`), Message: "no such setting (reply_to, webhook)"}
		}
		writeError(w, http.StatusBadRequest, e)
		return llmq.Reply{}, false
	}
	route := llmq.Reply{To: b.ReplyTo, Webhook: b.Webhook}
	if tenant == store.AnyTenantNotifications && !route.Empty() {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "reply_to",
			Message: `the row of "*" holds secrets only: a route belongs to a tenant`})
		return route, false
	}
	if route.Empty() {
		return route, true
	}
	var ve *llmq.ValidationError
	if err := route.Validate(); errors.As(err, &ve) {
		details := make([]llmq.FieldError, len(ve.Errors))
		for i, fe := range ve.Errors {
			if fe.Field = strings.TrimPrefix(fe.Field, "reply_to."); fe.Field == "to" {
				fe.Field = "reply_to"
			}
			details[i] = fe
		}
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: details[0].Field,
			Message: details[0].Message, Details: details})
		return route, false
	}
	return route, true
}

// deleteTenantNotifications: DELETE /v1/admin/tenants/{tenant}/notifications,
// If-Match required.
func (tn *tenantNotifications) deleteTenantNotifications(w http.ResponseWriter, r *http.Request) {
	tenant, ok := notificationsTenant(w, r)
	if !ok {
		return
	}
	version, ok := ifMatch(w, r)
	if !ok {
		return
	}
	if err := tn.store.Delete(r.Context(), actor(r), tenant, version); err != nil {
		tn.tenantNotificationsError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// rotateWebhookSecret: POST /v1/admin/tenants/{tenant}/notifications/secrets.
// It makes a new secret the tenant's current one, keeps the one it
// replaces as the previous (both sign until the rotation ends) and shows
// the new one in this answer only. No If-Match: it changes only the
// secrets, whatever the version.
func (tn *tenantNotifications) rotateWebhookSecret(w http.ResponseWriter, r *http.Request) {
	tenant, ok := notificationsTenant(w, r)
	if !ok {
		return
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		tn.internalError(w, r, err)
		return
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	t, err := tn.store.RotateSecret(r.Context(), actor(r), tenant, secret)
	if err != nil {
		tn.tenantNotificationsError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(t.Version))
	writeJSON(w, http.StatusCreated, AdminNewSecret{Secret: secret, Notifications: adminTenantNotifications(t)})
}

// endSecretRotation: DELETE /v1/admin/tenants/{tenant}/notifications/secrets/previous.
func (tn *tenantNotifications) endSecretRotation(w http.ResponseWriter, r *http.Request) {
	tenant, ok := notificationsTenant(w, r)
	if !ok {
		return
	}
	t, err := tn.store.EndRotation(r.Context(), actor(r), tenant)
	if err != nil {
		tn.tenantNotificationsError(w, r, err)
		return
	}
	writeTenantNotifications(w, http.StatusOK, t)
}
