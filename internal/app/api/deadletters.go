package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/store"
)

// MaxReplay is the most letters one POST /v1/dead-letters/replay replays;
// the answer says when more await (more: true).
const MaxReplay = 1000

// replayPage is the page size of the letters a bulk replay reads: a page
// holds the letters' messages.
const replayPage = 100

// window reads since= and until= (RFC 3339) of the query.
func window(w http.ResponseWriter, r *http.Request) (since, until time.Time, ok bool) {
	q := r.URL.Query()
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &since}, {"until", &until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: p.name, Message: "must be an RFC 3339 time"})
				return since, until, false
			}
			*p.dst = t
		}
	}
	return since, until, true
}

// deadLetterReasons counts the letters in scope by reason: GET
// /v1/dead-letters/reasons ?since= &until=.
// deadLetters serves the dead letters: list, read, count, replay, purge.
type deadLetters struct {
	replies
	letters DeadLetterService
	// retryAfter is the Retry-After of a 503.
	retryAfter time.Duration
}

func (dl *deadLetters) deadLetterReasons(w http.ResponseWriter, r *http.Request) {
	since, until, ok := window(w, r)
	if !ok {
		return
	}
	s, _ := scopeOf(r)
	counts, err := dl.letters.Count(r.Context(), s.tenant, since, until)
	if err != nil {
		dl.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, reasonCounts(counts, since, until))
}

// reasonCounts is the answer of /reasons: every reason of dlq.Reasons in
// its order (zero when none), then any other reason the store holds.
func reasonCounts(counts []store.DeadLetterCount, since, until time.Time) DeadLetterReasons {
	out := DeadLetterReasons{Data: make([]ReasonCount, len(dlq.Reasons))}
	for i, reason := range dlq.Reasons {
		out.Data[i].Reason = string(reason)
	}
	if !since.IsZero() {
		out.Since = &since
	}
	if !until.IsZero() {
		out.Until = &until
	}
	for _, c := range counts {
		rc := ReasonCount{Reason: c.Reason, Count: c.Count, NotReplayed: c.NotReplayed, NewestAt: c.NewestAt}
		out.Total += c.Count
		out.NotReplayed += c.NotReplayed
		if i := slices.Index(dlq.Reasons, dlq.Reason(c.Reason)); i >= 0 {
			out.Data[i] = rc
		} else {
			out.Data = append(out.Data, rc)
		}
	}
	return out
}

// letterFilter is the body of POST /v1/dead-letters/replay and /purge:
// the letters to act on, within the request's scope.
type letterFilter struct {
	IDs    []int64    `json:"ids"`
	JobID  string     `json:"job_id"`
	Reason string     `json:"reason"`
	Since  *time.Time `json:"since"`
	Until  *time.Time `json:"until"`
	// All, for a purge only, means every letter in scope.
	All bool `json:"all"`
}

// readFilter reads and checks the filter body; the scope's tenant is
// added. named says whether the request named letters itself: a tenant
// key's own tenant does not count (it is not a choice), an operator's
// tenant parameter does (like `llmq dlq purge --tenant`).
func readFilter(w http.ResponseWriter, r *http.Request) (f store.DeadLetterFilter, named, ok bool) {
	if !jsonContent(w, r) {
		return f, false, false
	}
	var in letterFilter
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidJSON,
			Message: "the body must be a JSON filter {ids, job_id, reason, since, until, all}: " + err.Error()})
		return f, false, false
	}
	bad := func(field, msg string) (store.DeadLetterFilter, bool, bool) {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: field, Message: msg})
		return f, false, false
	}
	switch {
	case len(in.IDs) > store.ListLimitMax:
		return bad("ids", fmt.Sprintf("names more than %d letters", store.ListLimitMax))
	case slices.ContainsFunc(in.IDs, func(id int64) bool { return id < 1 }):
		return bad("ids", "letter ids are positive integers")
	case in.JobID != "" && !llmq.ValidID(in.JobID):
		return bad("job_id", fmt.Sprintf("must be 1-%d characters of [A-Za-z0-9._:-]", llmq.MaxIDLength))
	case in.Reason != "" && !slices.Contains(dlq.Reasons, dlq.Reason(in.Reason)):
		return bad("reason", fmt.Sprintf("unknown reason %.64q", in.Reason))
	}
	s, _ := scopeOf(r)
	f = store.DeadLetterFilter{IDs: in.IDs, JobID: in.JobID, Reason: in.Reason, Tenant: s.tenant, All: in.All}
	if in.Since != nil {
		f.Since = *in.Since
	}
	if in.Until != nil {
		f.Until = *in.Until
	}
	named = len(in.IDs) > 0 || in.JobID != "" || in.Reason != "" || in.Since != nil || in.Until != nil ||
		(s.operator && s.tenant != "")
	return f, named, true
}

// purgeDeadLetters deletes the letters a filter selects: POST
// /v1/dead-letters/purge. Like `llmq dlq purge`, a request that names no
// letters is refused unless it says all; a purge leaves the letters' jobs
// alone.
func (dl *deadLetters) purgeDeadLetters(w http.ResponseWriter, r *http.Request) {
	f, named, ok := readFilter(w, r)
	if !ok {
		return
	}
	if !named && !f.All {
		writeError(w, http.StatusBadRequest, Error{Code: CodeEmptyFilter,
			Message: "name the letters to purge (ids, job_id, reason, since, until) or send \"all\": true"})
		return
	}
	n, err := dl.letters.Purge(r.Context(), f)
	if err != nil {
		dl.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, PurgeReport{Purged: n})
}

// replayDeadLetters replays the letters a filter selects, each once, the
// newest first: POST /v1/dead-letters/replay. Like `llmq dlq replay`, the
// request must name letters; a letter replayed before is counted and left
// alone. At most MaxReplay letters are replayed per call.
func (dl *deadLetters) replayDeadLetters(w http.ResponseWriter, r *http.Request) {
	f, named, ok := readFilter(w, r)
	if !ok {
		return
	}
	if f.All {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "all",
			Message: "a replay names its letters (ids, job_id, reason, since, until); all is for a purge"})
		return
	}
	if !named {
		writeError(w, http.StatusBadRequest, Error{Code: CodeEmptyFilter,
			Message: "name the letters to replay: ids, job_id, reason, since or until"})
		return
	}
	ctx := r.Context()
	out := ReplayReport{Failed: []ReplayFailure{}}
	// Collect first: replaying while paging would shift the pages.
	var ids []int64
	for cursor := ""; ; {
		recs, next, err := dl.letters.List(ctx, store.DeadLetterListOptions{DeadLetterFilter: f, Limit: replayPage, After: cursor})
		if err != nil {
			dl.internalError(w, r, err)
			return
		}
		for _, d := range recs {
			switch {
			case d.ReplayedAt != nil:
				out.AlreadyReplayed++
			case len(ids) == MaxReplay:
				out.More = true
			default:
				ids = append(ids, d.ID)
			}
		}
		if next == "" || out.More {
			break
		}
		cursor = next
	}
	s, _ := scopeOf(r)
	for _, id := range ids {
		res, err := dl.letters.Replay(ctx, s.tenant, id)
		switch {
		case errors.Is(err, dlq.ErrNoPublisher):
			setRetryAfter(w, dl.retryAfter)
			writeError(w, http.StatusServiceUnavailable, Error{Code: CodeUnavailable, Message: "replay is not configured on this server"})
			return
		case errors.Is(err, dlq.ErrNotFound):
			out.Failed = append(out.Failed, ReplayFailure{ID: id, Code: CodeNotFound, Message: "the letter was purged meanwhile"})
		case errors.Is(err, dlq.ErrNotReplayable):
			out.Failed = append(out.Failed, ReplayFailure{ID: id, Code: CodeNotReplayable, Message: "its job is no longer dead-lettered"})
		case err != nil:
			dl.log.Error("api: replay dead letter", slog.Int64("dead_letter_id", id), slog.String("error", err.Error()))
			out.Failed = append(out.Failed, ReplayFailure{ID: id, Code: CodeInternal,
				Message: "the replay failed (the server log says why); a replay that had begun is completed by the repair sweep"})
		case res.Replayed:
			out.Replayed++
		default:
			out.AlreadyReplayed++
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// listDeadLetters pages the letters in scope, newest first: GET
// /v1/dead-letters ?reason= &job_id= &since= &until= &limit= &cursor=.
// Each letter is a bounded list entry (dlq.View).
func (dl *deadLetters) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s, _ := scopeOf(r)
	query := store.DeadLetterListOptions{
		DeadLetterFilter: store.DeadLetterFilter{Tenant: s.tenant, Reason: q.Get("reason"), JobID: q.Get("job_id")},
		After:            q.Get("cursor"),
	}
	bad := func(field, msg string) {
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: field, Message: msg})
	}
	switch {
	case query.Reason != "" && !slices.Contains(dlq.Reasons, dlq.Reason(query.Reason)):
		bad("reason", "reason must be one of "+reasonNames())
		return
	case query.JobID != "" && !llmq.ValidID(query.JobID):
		bad("job_id", fmt.Sprintf("job_id must be 1-%d characters of [A-Za-z0-9._:-]", llmq.MaxIDLength))
		return
	case query.After != "" && !validCursor(query.After):
		bad("cursor", "cursor was not returned by this API")
		return
	}
	since, until, ok := window(w, r)
	if !ok {
		return
	}
	query.Since, query.Until = since, until
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.ListLimitMax {
			bad("limit", "limit must be an integer from 1 to "+strconv.Itoa(store.ListLimitMax))
			return
		}
		query.Limit = n
	}
	recs, next, err := dl.letters.List(r.Context(), query)
	if err != nil {
		dl.letterError(w, r, err)
		return
	}
	var cursor *string
	if next != "" {
		cursor = &next
	}
	writeJSON(w, http.StatusOK, struct {
		Data       []dlq.View `json:"data"`
		NextCursor *string    `json:"next_cursor"`
	}{dlq.Views(recs), cursor})
}

// getDeadLetter answers one letter in scope, whole (headers and message):
// GET /v1/dead-letters/{id}.
func (dl *deadLetters) getDeadLetter(w http.ResponseWriter, r *http.Request) {
	id, ok := letterID(w, r)
	if !ok {
		return
	}
	s, _ := scopeOf(r)
	d, err := dl.letters.Get(r.Context(), s.tenant, id)
	if err != nil {
		dl.letterError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, dlq.NewView(d, true))
}

// replayDeadLetter replays one letter in scope, once: POST
// /v1/dead-letters/{id}/replay; replayed says whether this call did.
func (dl *deadLetters) replayDeadLetter(w http.ResponseWriter, r *http.Request) {
	id, ok := letterID(w, r)
	if !ok {
		return
	}
	s, _ := scopeOf(r)
	res, err := dl.letters.Replay(r.Context(), s.tenant, id)
	if err != nil {
		dl.letterError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Data     dlq.View `json:"data"`
		Replayed bool     `json:"replayed"`
	}{dlq.NewView(res.Record, false), res.Replayed})
}

// letterID reads the {id} of the path; a path that is no letter id answers
// 404, like a missing letter (or another tenant's).
func letterID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusNotFound, Error{Code: CodeNotFound, Field: "id", Message: "dead letter not found"})
		return 0, false
	}
	return id, true
}

// letterError answers an error of the dead-letter service.
func (dl *deadLetters) letterError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, dlq.ErrNotFound):
		writeError(w, http.StatusNotFound, Error{Code: CodeNotFound, Field: "id", Message: "dead letter not found"})
	case errors.Is(err, dlq.ErrNotReplayable):
		writeError(w, http.StatusConflict, Error{Code: CodeNotReplayable, Field: "id", Message: err.Error()})
	case errors.Is(err, dlq.ErrBadCursor):
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "cursor", Message: "cursor was not returned by this API"})
	case isDataException(err):
		// A filter the database cannot even compare (a forged cursor's
		// bytes): bad input, not a server error.
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue,
			Message: "a parameter holds bytes the database cannot read"})
	case errors.Is(err, dlq.ErrNoPublisher):
		setRetryAfter(w, dl.retryAfter)
		writeError(w, http.StatusServiceUnavailable, Error{Code: CodeUnavailable, Message: "replay is not configured on this server"})
	default:
		dl.internalError(w, r, err)
	}
}

func reasonNames() string {
	names := make([]string, len(dlq.Reasons))
	for i, r := range dlq.Reasons {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// validCursor reports whether c can be a cursor this API printed: URL-safe
// base64 (the store's own check then refuses what it did not produce).
func validCursor(c string) bool {
	_, err := base64.RawURLEncoding.DecodeString(c)
	return err == nil && len(c) <= maxCursorBytes
}
