package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// MaxNotifications is the most notifications GET /v1/notifications lists.
const MaxNotifications = 1000

// Notification is a result event of the outbox as the API shows it
// (docs/design/notifications.md).
type Notification struct {
	EventID     string      `json:"event_id"`
	JobID       string      `json:"job_id"`
	Tenant      string      `json:"tenant"`
	Status      llmq.Status `json:"status"`
	State       string      `json:"state"`
	ReplyTo     string      `json:"reply_to,omitempty"`
	Webhook     string      `json:"webhook,omitempty"`
	Attempts    int         `json:"attempts"`
	LastError   string      `json:"last_error,omitempty"`
	CreatedAt   time.Time   `json:"created_at"`
	NextAttempt *time.Time  `json:"next_attempt_at,omitempty"`
	DeadAt      *time.Time  `json:"dead_at,omitempty"`
	DeadReason  string      `json:"dead_reason,omitempty"`
}

// NewNotificationView is the view of a notification (the API, llmq
// notifications --json).
func NewNotificationView(n *store.Notification) Notification {
	v := Notification{EventID: n.EventID, JobID: n.JobID, Tenant: n.Tenant, Status: n.Status, ReplyTo: n.Reply.To,
		Webhook: n.Reply.Webhook, Attempts: n.Attempts, LastError: n.LastError, CreatedAt: n.CreatedAt,
		DeadAt: n.DeadAt, DeadReason: n.DeadReason, State: store.NotificationDead}
	if n.DeadAt == nil {
		v.State = store.NotificationPending
		next := n.NextAttempt
		v.NextAttempt = &next
	}
	return v
}

// notificationHandler serves the result events of jobs with a route and
// their replay.
type notificationHandler struct {
	replies
	store NotificationStore
	clock clockwork.Clock
}

// listNotifications answers GET /v1/notifications ?state= &job_id=
// &limit=: the newest undelivered result events in scope (a delivered
// one leaves the outbox).
func (nh *notificationHandler) listNotifications(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s, _ := scopeOf(r)
	f := store.NotificationFilter{Tenant: s.tenant, State: q.Get("state"), JobID: q.Get("job_id"), Limit: 100}
	switch f.State {
	case "", store.NotificationPending, store.NotificationDead:
	default:
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "state",
			Message: "must be pending or dead"})
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxNotifications {
			writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "limit",
				Message: "must be an integer from 1 to " + strconv.Itoa(MaxNotifications)})
			return
		}
		f.Limit = n
	}
	ns, err := nh.store.List(r.Context(), f)
	if err != nil {
		nh.internalError(w, r, err)
		return
	}
	out := make([]Notification, len(ns))
	for i, n := range ns {
		out[i] = NewNotificationView(n)
	}
	writeJSON(w, http.StatusOK, struct {
		Data       []Notification `json:"data"`
		NextCursor *string        `json:"next_cursor"`
	}{out, nil})
}

// replayNotification answers POST /v1/notifications/{event_id}/replay:
// the result event is sent again (same event id); the job is not touched.
func (nh *notificationHandler) replayNotification(w http.ResponseWriter, r *http.Request) {
	s, _ := scopeOf(r)
	n, err := nh.store.Replay(r.Context(), s.tenant, r.PathValue("event_id"), nh.clock.Now())
	if errors.Is(err, store.ErrNotificationNotFound) {
		writeError(w, http.StatusNotFound, Error{Code: CodeNotFound, Field: "event_id", Message: "notification not found"})
		return
	}
	if err != nil {
		nh.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Data Notification `json:"data"`
	}{NewNotificationView(n)})
}

// ReplayDeadReport is the answer of POST /v1/notifications/replay.
type ReplayDeadReport struct {
	Replayed int64 `json:"replayed"`
}

// replayDeadNotifications answers POST /v1/notifications/replay: every
// dead result event in scope (of the body's job_id, when it names one) is
// due again now, with its event id, its retry period restarted; pending
// ones are left as they are, and no job is touched.
func (nh *notificationHandler) replayDeadNotifications(w http.ResponseWriter, r *http.Request) {
	if !jsonContent(w, r) {
		return
	}
	var in struct {
		JobID string `json:"job_id"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidJSON,
			Message: "the body must be a JSON object {job_id} ({} for every dead event in scope): " + err.Error()})
		return
	}
	if in.JobID != "" && !llmq.ValidID(in.JobID) {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "job_id",
			Message: fmt.Sprintf("must be 1-%d characters of [A-Za-z0-9._:-]", llmq.MaxIDLength)})
		return
	}
	s, _ := scopeOf(r)
	n, err := nh.store.ReplayDead(r.Context(), s.tenant, in.JobID, nh.clock.Now())
	if err != nil {
		nh.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ReplayDeadReport{Replayed: n})
}
