package console

import (
	"encoding/json"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/dlq"
	"github.com/llmq/llmq/internal/app/api"
)

// maxKeyBytes bounds a pasted key.
const maxKeyBytes = 4096

// notice is the confirmation shown after an action (?done=<what>&n=<count>).
func notice(q url.Values) string {
	n, _ := strconv.ParseInt(q.Get("n"), 10, 64)
	switch q.Get("done") {
	case "replayed":
		if n == 0 {
			return "Nothing was replayed: the letters had been replayed before."
		}
		return "Replayed " + plural(n, "dead letter", "dead letters") + ": the jobs are queued again."
	case "purged":
		return "Purged " + plural(n, "dead letter", "dead letters") + "."
	case "cancelled":
		return "The job is cancelled."
	case "paused":
		return "The tenant is paused: its queued jobs wait (reason paused) and its gateway calls are refused, on every replica within 2 s."
	case "resumed":
		return "The tenant is resumed: its jobs are claimed again."
	case "tenant-updated":
		return "The tenant's limits are changed: every replica applies them within 2 s."
	case "model-updated":
		return "The model's limits are changed: every worker moves its lanes to them within 2 s."
	case "tenant-created":
		return "The tenant is created: every replica serves it within 2 s."
	case "key-revoked":
		return "The key is revoked: every replica refuses it within 2 s."
	case "events-replayed":
		return "Replayed " + plural(n, "dead result event", "dead result events") + ": the notifier sends them now, with the same event ids. The jobs are not touched."
	case "notification-replayed":
		return "The result event is due again: the notifier sends it now, with the same event id. The job is not touched."
	case "batch-cancelled":
		return "The provider was asked to cancel the batch: finished results are brought home, the other jobs go back to the live lane."
	}
	return ""
}

// scopeQuery is the tenant parameter an operator's page passes on to the
// API (none for a tenant key: the API scopes it).
func scopeQuery(s session, r *http.Request) url.Values {
	q := url.Values{}
	if t := r.URL.Query().Get("tenant"); s.Operator && t != "" {
		q.Set("tenant", t)
	}
	return q
}

// ---- sign-in ----

type loginPage struct {
	Token string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if _, ok := c.sessionOf(r); ok {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
		return
	}
	c.renderLogin(w, r, http.StatusOK, "")
}

// renderLogin shows the sign-in form with a fresh nonce and its token.
func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	nonce := randomID()
	http.SetCookie(w, c.cookie(r, loginCookie, nonce, time.Hour))
	c.renderStatus(w, r, status, "login", pageData{Title: "Sign in", Error: msg,
		Page: loginPage{Token: c.seal.token("login:" + nonce)}})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	nonce, err := r.Cookie(loginCookie)
	if err != nil || !c.seal.checkToken("login:"+nonce.Value, r.PostFormValue("csrf")) {
		c.renderLogin(w, r, http.StatusForbidden, "The sign-in form was out of date or not sent by the console. Try again.")
		return
	}
	key := strings.TrimSpace(r.PostFormValue("key"))
	if key == "" || len(key) > maxKeyBytes {
		c.renderLogin(w, r, http.StatusBadRequest, "Paste an API key.")
		return
	}
	var me api.Me
	switch err := c.call(r.Context(), key, http.MethodGet, "/v1/me", nil, nil, &me); {
	case errors.Is(err, errUnauthorized):
		c.renderLogin(w, r, http.StatusUnauthorized, "The API does not know this key.")
		return
	case err != nil:
		c.log.Error("console: sign-in", slog.String("error", err.Error()))
		c.renderLogin(w, r, http.StatusInternalServerError, "The API could not be asked: the server log says why.")
		return
	}
	s := session{Key: key, ID: randomID(), Issued: c.cfg.Clock.Now().Unix(), Operator: me.Operator}
	if me.Tenant != nil {
		s.Tenant = *me.Tenant
	}
	sealed, err := c.seal.seal(s)
	if err != nil {
		c.renderLogin(w, r, http.StatusInternalServerError, "The session could not be sealed.")
		return
	}
	http.SetCookie(w, c.cookie(r, sessionCookie, sealed, c.cfg.SessionTTL))
	http.SetCookie(w, c.cookie(r, loginCookie, "", -1))
	http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, _ session) {
	http.SetCookie(w, c.cookie(r, sessionCookie, "", -1))
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

// ---- overview ----

type overviewPage struct {
	Queue    *api.Queue
	QueueErr string
	Counts   api.JobCounts
	Active   int64
	// ActiveAtLeast says Active is a floor: a status's count stopped at
	// the API's limit.
	ActiveAtLeast bool
	Bar           template.HTML
	Legend        []segment
	Letters       api.DeadLetterReasons
	Since         time.Time
	Bars          template.HTML
	Batches       []api.Batch
	// BatchBars draws each batch's requests.
	BatchBars map[string]template.HTML
	// Arrivals are the jobs recorded and finished per minute of the last
	// hour.
	Arrivals arrivals
	// Models are the charts of the models called in the last hour.
	Models   []modelCharts
	Operator bool
	// Tenant is an operator's tenant filter; TenantQuery is "?tenant=..."
	// and TenantAmp "&tenant=..." for links ("" without a filter).
	Tenant, TenantQuery, TenantAmp string
}

// tenantLinks returns "?tenant=t" and "&tenant=t" ("" when t is "").
func tenantLinks(t string) (query, amp string) {
	if t == "" {
		return "", ""
	}
	v := url.Values{"tenant": {t}}.Encode()
	return "?" + v, "&" + v
}

// deadLetterWindow is the overview's window of dead letters.
const deadLetterWindow = 24 * time.Hour

func (jp *jobPages) overviewData(r *http.Request, s session) (overviewPage, error) {
	ctx, q := r.Context(), scopeQuery(s, r)
	p := overviewPage{Operator: s.Operator, Tenant: q.Get("tenant"), BatchBars: map[string]template.HTML{}}
	p.TenantQuery, p.TenantAmp = tenantLinks(p.Tenant)
	var queue api.Queue
	var ae *apiError
	switch err := jp.call(ctx, s.Key, http.MethodGet, "/v1/queue", nil, nil, &queue); {
	case errors.As(err, &ae) && ae.status == http.StatusServiceUnavailable:
		p.QueueErr = ae.body.Message
	case err != nil:
		return p, err
	default:
		p.Queue = &queue
	}
	if err := jp.call(ctx, s.Key, http.MethodGet, "/v1/stats/jobs", q, nil, &p.Counts); err != nil {
		return p, err
	}
	for _, st := range llmq.Statuses {
		n := p.Counts.ByStatus[string(st)]
		atLeast := slices.Contains(p.Counts.AtLeast, string(st))
		p.Legend = append(p.Legend, segment{Key: string(st), Label: strings.ReplaceAll(string(st), "_", " "), Value: n, AtLeast: atLeast})
		if !st.Terminal() {
			p.Active += n
			p.ActiveAtLeast = p.ActiveAtLeast || atLeast
		}
	}
	p.Bar = stackedBar(p.Legend, barThick)
	p.Since = jp.clock.Now().Add(-deadLetterWindow).UTC().Truncate(time.Second)
	dq := url.Values{"since": {p.Since.Format(time.RFC3339)}}
	if t := q.Get("tenant"); t != "" {
		dq.Set("tenant", t)
	}
	if err := jp.call(ctx, s.Key, http.MethodGet, "/v1/dead-letters/reasons", dq, nil, &p.Letters); err != nil {
		return p, err
	}
	rows := make([]segment, len(p.Letters.Data))
	for i, rc := range p.Letters.Data {
		rows[i] = segment{Key: rc.Reason, Label: strings.ReplaceAll(rc.Reason, "_", " "), Value: rc.Count}
	}
	p.Bars = barRows(rows)
	var rates api.Arrivals
	if err := jp.call(ctx, s.Key, http.MethodGet, "/v1/stats/arrivals", q, nil, &rates); err != nil {
		return p, err
	}
	p.Arrivals = arrivalsOf(rates)
	var stats api.ModelStats
	if err := jp.call(ctx, s.Key, http.MethodGet, "/v1/stats/models", q, nil, &stats); err != nil {
		return p, err
	}
	for _, m := range stats.Data {
		p.Models = append(p.Models, chartsOf(m))
	}
	if s.Operator {
		var l api.List[api.Batch]
		if err := jp.call(ctx, s.Key, http.MethodGet, "/v1/batches", url.Values{"open": {"true"}}, nil, &l); err != nil {
			return p, err
		}
		p.Batches = l.Data
		for _, b := range p.Batches {
			p.BatchBars[b.ID] = batchBar(b)
		}
	}
	return p, nil
}

func (jp *jobPages) overview(w http.ResponseWriter, r *http.Request, s session) {
	p, err := jp.overviewData(r, s)
	if err != nil {
		jp.failed(w, r, s, err)
		return
	}
	jp.render(w, r, "overview", jp.data(r, s, "Overview", "overview", pageData{Page: p}))
}

func (jp *jobPages) overviewLive(w http.ResponseWriter, r *http.Request, s session) {
	p, err := jp.overviewData(r, s)
	if err != nil {
		jp.failed(w, r, s, err)
		return
	}
	jp.render(w, r, "overview#live", jp.data(r, s, "Overview", "overview", pageData{Page: p}))
}

// ---- jobs ----

type jobsPage struct {
	Status, Tenant, After string
	Limit                 int
	Jobs                  []api.Job
	Next                  string
	// Live is the query of the live table (first page only).
	Live     string
	Operator bool
}

var pageSizes = []int{25, 50, 100}

func (jp *jobPages) jobsData(r *http.Request, s session) (jobsPage, error) {
	in := r.URL.Query()
	p := jobsPage{Status: in.Get("status"), After: in.Get("after"), Limit: 50, Operator: s.Operator}
	if s.Operator {
		p.Tenant = in.Get("tenant")
	}
	if n, err := strconv.Atoi(in.Get("limit")); err == nil && slices.Contains(pageSizes, n) {
		p.Limit = n
	}
	q := scopeQuery(s, r)
	q.Set("limit", strconv.Itoa(p.Limit))
	if p.Status != "" {
		q.Set("status", p.Status)
	}
	live := url.Values{}
	for k, v := range q {
		live[k] = v
	}
	p.Live = live.Encode()
	if p.After != "" {
		q.Set("after", p.After)
	}
	var l api.List[api.Job]
	if err := jp.call(r.Context(), s.Key, http.MethodGet, "/v1/jobs", q, nil, &l); err != nil {
		return p, err
	}
	p.Jobs = l.Data
	if l.NextCursor != nil {
		p.Next = *l.NextCursor
	}
	return p, nil
}

func (jp *jobPages) jobs(w http.ResponseWriter, r *http.Request, s session) {
	p, err := jp.jobsData(r, s)
	if err != nil {
		jp.failed(w, r, s, err)
		return
	}
	jp.render(w, r, "jobs", jp.data(r, s, "Jobs", "jobs", pageData{Page: p}))
}

func (jp *jobPages) jobsLive(w http.ResponseWriter, r *http.Request, s session) {
	p, err := jp.jobsData(r, s)
	if err != nil {
		jp.failed(w, r, s, err)
		return
	}
	jp.render(w, r, "jobs#live", jp.data(r, s, "Jobs", "jobs", pageData{Page: p}))
}

// ---- one job ----

type jobPage struct {
	Job api.Job
	// Answer is the assistant's message of a succeeded job.
	Answer string
	// TenantQuery is "?tenant=..." for an operator's links and forms.
	TenantQuery string
	Operator    bool
	// Timeline draws the job's calls; Events lists its changes of state.
	Timeline template.HTML
	Events   []event
	// Notifications are the job's result events not yet delivered
	// (GET /v1/notifications?job_id=).
	Notifications []api.Notification
}

func (jp *jobPages) jobData(r *http.Request, s session) (jobPage, error) {
	p := jobPage{Operator: s.Operator}
	q := scopeQuery(s, r)
	if len(q) > 0 {
		p.TenantQuery = "?" + q.Encode()
	}
	err := jp.call(r.Context(), s.Key, http.MethodGet, "/v1/jobs/"+url.PathEscape(r.PathValue("id")), q, nil, &p.Job)
	if err != nil {
		return p, err
	}
	var result struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(p.Job.Result, &result) == nil && len(result.Choices) > 0 {
		p.Answer = result.Choices[0].Message.Content
	}
	p.Timeline, p.Events = callTimeline(p.Job, jp.clock.Now()), jobEvents(p.Job)
	nq := url.Values{"job_id": {p.Job.ID}}
	if s.Operator {
		nq.Set("tenant", p.Job.Tenant)
	}
	var ns api.List[api.Notification]
	// An API without notifications (404) shows none.
	if err := jp.call(r.Context(), s.Key, http.MethodGet, "/v1/notifications", nq, nil, &ns); err == nil {
		p.Notifications = ns.Data
	}
	return p, nil
}

func (jp *jobPages) job(w http.ResponseWriter, r *http.Request, s session) {
	p, err := jp.jobData(r, s)
	if err != nil {
		jp.failed(w, r, s, err)
		return
	}
	jp.render(w, r, "job", jp.data(r, s, "Job "+p.Job.ID, "jobs", pageData{Page: p}))
}

func (jp *jobPages) jobLive(w http.ResponseWriter, r *http.Request, s session) {
	p, err := jp.jobData(r, s)
	if err != nil {
		jp.failed(w, r, s, err)
		return
	}
	jp.render(w, r, "job#live", jp.data(r, s, "Job "+p.Job.ID, "jobs", pageData{Page: p}))
}

func (jp *jobPages) cancelJob(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PathValue("id")
	q := url.Values{}
	if t := r.PostFormValue("tenant"); s.Operator && t != "" {
		q.Set("tenant", t)
	}
	if err := jp.call(r.Context(), s.Key, http.MethodDelete, "/v1/jobs/"+url.PathEscape(id), q, nil, nil); err != nil {
		jp.failed(w, r, s, err)
		return
	}
	q.Set("done", "cancelled")
	http.Redirect(w, r, Prefix+"/jobs/"+url.PathEscape(id)+"?"+q.Encode(), http.StatusSeeOther)
}

// replayNotification sends a job's result event again (POST
// /v1/notifications/{event_id}/replay), never the job.
func (jp *jobPages) replayNotification(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PathValue("id")
	q := url.Values{}
	if t := r.PostFormValue("tenant"); s.Operator && t != "" {
		q.Set("tenant", t)
	}
	if err := jp.call(r.Context(), s.Key, http.MethodPost, "/v1/notifications/"+url.PathEscape(r.PathValue("event"))+"/replay",
		q, nil, nil); err != nil {
		jp.failed(w, r, s, err)
		return
	}
	q.Set("done", "notification-replayed")
	http.Redirect(w, r, Prefix+"/jobs/"+url.PathEscape(id)+"?"+q.Encode(), http.StatusSeeOther)
}

// ---- dead letters ----

// confirm is the dialog that asks before an action.
type confirm struct {
	// Keep is the label of the way out.
	Title, Text, Button, Keep, Action string
	Danger                            bool
	// Fields are the form's hidden fields.
	Fields map[string]string
	// Back is where Cancel goes (the page without the dialog).
	Back string
}

type deadLettersPage struct {
	Reasons api.DeadLetterReasons
	Bars    template.HTML
	Letters []dlq.View
	// Hidden counts the replayed letters of the page not shown.
	Hidden  int
	ShowAll bool
	Reason  string
	Tenant  string
	Cursor  string
	Next    string
	// Query is the page's own query, for links back to it; AmpQuery is
	// "&" + Query; QueryShowAll and QueryNoShow are it with and without
	// show=all, QueryFirst without the cursor.
	Query, AmpQuery, QueryShowAll, QueryNoShow, QueryFirst string
	TenantQuery, TenantAmp                                 string
	Confirm                                                *confirm
	Operator                                               bool
	// DeadEvents are the newest result events given up on
	// (notification_undeliverable): their jobs ended, their routes did not
	// take them.
	DeadEvents []api.Notification
}

// deadEventsShown is how many dead result events the dead letters page
// lists.
const deadEventsShown = 20

func (dp *deadLetterPages) deadLetters(w http.ResponseWriter, r *http.Request, s session) {
	ctx, in := r.Context(), r.URL.Query()
	p := deadLettersPage{Reason: in.Get("reason"), Cursor: in.Get("cursor"), ShowAll: in.Get("show") == "all", Operator: s.Operator}
	q := scopeQuery(s, r)
	p.Tenant = q.Get("tenant")
	if err := dp.call(ctx, s.Key, http.MethodGet, "/v1/dead-letters/reasons", q, nil, &p.Reasons); err != nil {
		dp.failed(w, r, s, err)
		return
	}
	rows := make([]segment, len(p.Reasons.Data))
	for i, rc := range p.Reasons.Data {
		rows[i] = segment{Key: rc.Reason, Label: strings.ReplaceAll(rc.Reason, "_", " "), Value: rc.NotReplayed}
	}
	p.Bars = barRows(rows)
	lq := url.Values{"limit": {"50"}}
	for k, v := range q {
		lq[k] = v
	}
	if p.Reason != "" {
		lq.Set("reason", p.Reason)
	}
	if p.Cursor != "" {
		lq.Set("cursor", p.Cursor)
	}
	var l api.List[dlq.View]
	if err := dp.call(ctx, s.Key, http.MethodGet, "/v1/dead-letters", lq, nil, &l); err != nil {
		dp.failed(w, r, s, err)
		return
	}
	for _, d := range l.Data {
		if d.ReplayedAt != nil && !p.ShowAll {
			p.Hidden++
			continue
		}
		p.Letters = append(p.Letters, d)
	}
	if l.NextCursor != nil {
		p.Next = *l.NextCursor
	}
	nq := url.Values{"state": {"dead"}, "limit": {strconv.Itoa(deadEventsShown)}}
	if p.Tenant != "" {
		nq.Set("tenant", p.Tenant)
	}
	var events api.List[api.Notification]
	// An API without notifications (404) shows none.
	if err := dp.call(ctx, s.Key, http.MethodGet, "/v1/notifications", nq, nil, &events); err == nil {
		p.DeadEvents = events.Data
	}
	own := url.Values{}
	for _, k := range []string{"reason", "tenant", "cursor", "show"} {
		if v := in.Get(k); v != "" {
			own.Set(k, v)
		}
	}
	p.Query = own.Encode()
	if p.Query != "" {
		p.AmpQuery = "&" + p.Query
	}
	variant := func(set, del string) string {
		v := url.Values{}
		for k, vs := range own {
			v[k] = vs
		}
		if set != "" {
			v.Set(set, "all")
		}
		v.Del(del)
		return v.Encode()
	}
	p.QueryShowAll, p.QueryNoShow, p.QueryFirst = variant("show", "cursor"), variant("", "show"), variant("", "cursor")
	p.TenantQuery, p.TenantAmp = tenantLinks(p.Tenant)
	p.Confirm = dp.deadLetterConfirm(in, p)
	dp.render(w, r, "dead-letters", dp.data(r, s, "Dead letters", "dead-letters", pageData{Page: p}))
}

// deadLetterConfirm is the dialog a ?confirm=replay|purge link opens: for
// one letter (&id=) or a reason (&group=); ?confirm=replay-events opens
// the one for every dead result event.
func (dp *deadLetterPages) deadLetterConfirm(in url.Values, p deadLettersPage) *confirm {
	action := in.Get("confirm")
	if action != "replay" && action != "purge" && action != "replay-events" {
		return nil
	}
	back := Prefix + "/dead-letters"
	if p.Query != "" {
		back += "?" + p.Query
	}
	d := &confirm{Action: Prefix + "/dead-letters/" + action, Back: back, Fields: map[string]string{"return": back}}
	if p.Tenant != "" {
		d.Fields["tenant"] = p.Tenant
	}
	if action == "replay-events" {
		d.Title, d.Button, d.Keep = "Replay every dead result event", "Replay", "Not now"
		if p.Tenant != "" {
			d.Title += " of tenant " + p.Tenant
		}
		d.Title += "?"
		d.Text = "Each event is sent again now to its route, with the same event id and its retry period restarted. " +
			"The jobs are not touched. llmq notifications replay --dead does the same."
		return d
	}
	what, one := "", false
	if id, err := strconv.ParseInt(in.Get("id"), 10, 64); err == nil && id > 0 {
		d.Fields["id"] = strconv.FormatInt(id, 10)
		what, one = "dead letter "+strconv.FormatInt(id, 10), true
		for _, l := range p.Letters {
			if l.ID == id && l.JobID != "" {
				what += " (job " + l.JobID + ")"
			}
		}
	} else if g := in.Get("group"); slices.Contains(dlq.Reasons, dlq.Reason(g)) {
		d.Fields["reason"] = g
		for _, rc := range p.Reasons.Data {
			if rc.Reason == g {
				if action == "replay" {
					what = plural(rc.NotReplayed, "dead letter", "dead letters") + " awaiting replay with reason " + g
				} else {
					what = plural(rc.Count, "dead letter", "dead letters") + " with reason " + g
				}
			}
		}
	} else {
		return nil
	}
	if p.Tenant != "" {
		what += " of tenant " + p.Tenant
	}
	subject, keep := "Each letter's original message is", "Keep them"
	if one {
		subject, keep = "The letter's original message is", "Keep it"
	}
	if action == "replay" {
		d.Title, d.Button, d.Keep = "Replay "+what+"?", "Replay", "Not now"
		d.Text = subject + " published again, with its job queued and its attempts reset. " +
			"A letter is replayed once: one replayed before is left alone. llmq dlq replay does the same."
	} else {
		d.Title, d.Button, d.Danger, d.Keep = "Purge "+what+"?", "Purge", true, keep
		d.Text = strings.Replace(subject, "original message is", "record is", 1) + " deleted from Postgres; the jobs and the copies in the .dlq " +
			"topic or queue stay. This cannot be undone. llmq dlq purge does the same."
	}
	return d
}

func (dp *deadLetterPages) deadLetter(w http.ResponseWriter, r *http.Request, s session) {
	var v dlq.View
	id := r.PathValue("id")
	if err := dp.call(r.Context(), s.Key, http.MethodGet, "/v1/dead-letters/"+url.PathEscape(id), scopeQuery(s, r), nil, &v); err != nil {
		dp.failed(w, r, s, err)
		return
	}
	dp.render(w, r, "dead-letter", dp.data(r, s, "Dead letter "+id, "dead-letters", pageData{Page: v}))
}

// letterAction reads a replay or purge form: the letters (one id or a
// reason), the tenant and where to go back.
func letterAction(r *http.Request, s session) (filter map[string]any, q url.Values, back string) {
	filter = map[string]any{}
	if id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64); err == nil {
		filter["ids"] = []int64{id}
	}
	if reason := r.PostFormValue("reason"); reason != "" {
		filter["reason"] = reason
	}
	q = url.Values{}
	if t := r.PostFormValue("tenant"); s.Operator && t != "" {
		q.Set("tenant", t)
	}
	back = r.PostFormValue("return")
	if u, err := url.Parse(back); err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(u.Path, Prefix+"/") ||
		strings.HasPrefix(back, "//") {
		back = Prefix + "/dead-letters"
	}
	return filter, q, back
}

// withDone adds the notice of an action to a page's URL.
func withDone(back, done string, n int64) string {
	sep := "?"
	if strings.Contains(back, "?") {
		sep = "&"
	}
	return back + sep + url.Values{"done": {done}, "n": {strconv.FormatInt(n, 10)}}.Encode()
}

func (dp *deadLetterPages) replay(w http.ResponseWriter, r *http.Request, s session) {
	filter, q, back := letterAction(r, s)
	var rep api.ReplayReport
	if err := dp.call(r.Context(), s.Key, http.MethodPost, "/v1/dead-letters/replay", q, filter, &rep); err != nil {
		dp.failed(w, r, s, err)
		return
	}
	if len(rep.Failed) > 0 {
		f := rep.Failed[0]
		dp.renderStatus(w, r, http.StatusConflict, "error", dp.data(r, s, "Replay", "dead-letters", pageData{
			Error: "Dead letter " + strconv.FormatInt(f.ID, 10) + " could not be replayed: " + f.Message +
				" (" + plural(int64(rep.Replayed), "letter", "letters") + " replayed, " + plural(int64(len(rep.Failed)), "failure", "failures") + ")."}))
		return
	}
	http.Redirect(w, r, withDone(back, "replayed", int64(rep.Replayed)), http.StatusSeeOther)
}

// replayEvents makes every dead result event in scope due again (POST
// /v1/notifications/replay); the jobs are not touched.
func (dp *deadLetterPages) replayEvents(w http.ResponseWriter, r *http.Request, s session) {
	_, q, back := letterAction(r, s)
	var rep api.ReplayDeadReport
	if err := dp.call(r.Context(), s.Key, http.MethodPost, "/v1/notifications/replay", q, map[string]any{}, &rep); err != nil {
		dp.failed(w, r, s, err)
		return
	}
	http.Redirect(w, r, withDone(back, "events-replayed", rep.Replayed), http.StatusSeeOther)
}

func (dp *deadLetterPages) purge(w http.ResponseWriter, r *http.Request, s session) {
	filter, q, back := letterAction(r, s)
	var rep api.PurgeReport
	if err := dp.call(r.Context(), s.Key, http.MethodPost, "/v1/dead-letters/purge", q, filter, &rep); err != nil {
		dp.failed(w, r, s, err)
		return
	}
	http.Redirect(w, r, withDone(back, "purged", rep.Purged), http.StatusSeeOther)
}

// ---- batches ----

type batchesPage struct {
	Batches []api.Batch
	Open    bool
	Bars    map[string]template.HTML
}

// batchBar draws a batch's requests: completed, failed, the rest.
func batchBar(b api.Batch) template.HTML {
	total := int64(max(b.RequestTotal, b.JobCount))
	done, failed := int64(b.RequestCompleted), int64(b.RequestFailed)
	return stackedBar([]segment{{Key: "succeeded", Label: "completed", Value: done}, {Key: "failed", Label: "failed", Value: failed},
		{Key: "empty", Label: "waiting", Value: max(total-done-failed, 0)}}, barThin)
}

type usagePage struct {
	Scopes []api.ScopeUsage
	// Budgets are the scopes' budgets, one row each.
	Budgets []budgetRow
}

// budgetRow is one budget of a scope on the usage page.
type budgetRow struct {
	Tenant, Project string
	api.ScopeBudget
}

// usage shows GET /v1/usage: the scopes in view, their weights, limits and
// use.
func (jp *jobPages) usage(w http.ResponseWriter, r *http.Request, s session) {
	var l api.List[api.ScopeUsage]
	if err := jp.call(r.Context(), s.Key, http.MethodGet, "/v1/usage", nil, nil, &l); err != nil {
		jp.failed(w, r, s, err)
		return
	}
	p := usagePage{Scopes: l.Data}
	for _, sc := range l.Data {
		for _, b := range sc.Budgets {
			p.Budgets = append(p.Budgets, budgetRow{Tenant: sc.Tenant, Project: sc.Project, ScopeBudget: b})
		}
	}
	jp.render(w, r, "usage", jp.data(r, s, "Usage", "usage", pageData{Page: p}))
}

func (bp *batchPages) batches(w http.ResponseWriter, r *http.Request, s session) {
	p := batchesPage{Open: r.URL.Query().Get("open") == "true", Bars: map[string]template.HTML{}}
	q := url.Values{"limit": {"100"}}
	if p.Open {
		q.Set("open", "true")
	}
	var l api.List[api.Batch]
	if err := bp.call(r.Context(), s.Key, http.MethodGet, "/v1/batches", q, nil, &l); err != nil {
		bp.failed(w, r, s, err)
		return
	}
	p.Batches = l.Data
	for _, b := range p.Batches {
		p.Bars[b.ID] = batchBar(b)
	}
	bp.render(w, r, "batches", bp.data(r, s, "Batches", "batches", pageData{Page: p}))
}

type batchPage struct {
	Batch   api.Batch
	Bar     template.HTML
	Jobs    []segment
	JobsBar template.HTML
	Confirm *confirm
	// Cancellable: the provider is running it.
	Cancellable bool
}

func (bp *batchPages) batch(w http.ResponseWriter, r *http.Request, s session) {
	var p batchPage
	id := r.PathValue("id")
	if err := bp.call(r.Context(), s.Key, http.MethodGet, "/v1/batches/"+url.PathEscape(id), nil, nil, &p.Batch); err != nil {
		bp.failed(w, r, s, err)
		return
	}
	p.Bar = batchBar(p.Batch)
	for _, st := range llmq.Statuses {
		if n := p.Batch.JobsByStatus[string(st)]; n > 0 {
			p.Jobs = append(p.Jobs, segment{Key: string(st), Label: strings.ReplaceAll(string(st), "_", " "), Value: int64(n)})
		}
	}
	p.JobsBar = stackedBar(p.Jobs, barThin)
	p.Cancellable = slices.Contains([]string{"validating", "in_progress"}, p.Batch.Status)
	if r.URL.Query().Get("confirm") == "cancel" && p.Cancellable {
		self := Prefix + "/batches/" + url.PathEscape(p.Batch.ID)
		p.Confirm = &confirm{Action: self + "/cancel", Back: self, Button: "Cancel the batch", Keep: "Let it run", Danger: true,
			Title: "Cancel batch " + p.Batch.ID + "?",
			Text: "The provider is asked to cancel it. Results it finished are brought home as usual; its other " +
				num(int64(p.Batch.JobCount-p.Batch.RequestCompleted-p.Batch.RequestFailed)) +
				" jobs go back to the live lane and are answered there, at live prices.",
			Fields: map[string]string{}}
	}
	bp.render(w, r, "batch", bp.data(r, s, "Batch "+p.Batch.ID, "batches", pageData{Page: p}))
}

func (bp *batchPages) cancelBatch(w http.ResponseWriter, r *http.Request, s session) {
	id := r.PathValue("id")
	if err := bp.call(r.Context(), s.Key, http.MethodPost, "/v1/batches/"+url.PathEscape(id)+"/cancel", nil, nil, nil); err != nil {
		bp.failed(w, r, s, err)
		return
	}
	http.Redirect(w, r, Prefix+"/batches/"+url.PathEscape(id)+"?done=batch-cancelled", http.StatusSeeOther)
}

// ---- tenants ----

type tenantsPage struct {
	Tenants []api.AdminTenant
	Models  []api.AdminModel
	Keys    []api.AdminKey
	Audit   []api.AdminAuditEntry
	// NewKey is the key just created: shown on this page only.
	NewKey *api.AdminKey
}

// tenants lists the tenants and keys kept as data, with pause, resume,
// revocation and creation, and the audit log (the admin API: operators
// only).
func (tp *tenantPages) tenants(w http.ResponseWriter, r *http.Request, s session) {
	tp.renderTenants(w, r, s, http.StatusOK, nil, "")
}

// renderTenants renders the tenants page with a key just created, or the
// error of a form.
func (tp *tenantPages) renderTenants(w http.ResponseWriter, r *http.Request, s session, status int, newKey *api.AdminKey, formError string) {
	p := tenantsPage{NewKey: newKey}
	var ts struct{ Data []api.AdminTenant }
	if err := tp.call(r.Context(), s.Key, http.MethodGet, "/v1/admin/tenants", nil, nil, &ts); err != nil {
		tp.failed(w, r, s, err)
		return
	}
	var keys struct{ Data []api.AdminKey }
	if err := tp.call(r.Context(), s.Key, http.MethodGet, "/v1/admin/keys", nil, nil, &keys); err != nil {
		tp.failed(w, r, s, err)
		return
	}
	var audit struct{ Data []api.AdminAuditEntry }
	if err := tp.call(r.Context(), s.Key, http.MethodGet, "/v1/admin/audit", url.Values{"limit": {"50"}}, nil, &audit); err != nil {
		tp.failed(w, r, s, err)
		return
	}
	var models struct{ Data []api.AdminModel }
	if err := tp.call(r.Context(), s.Key, http.MethodGet, "/v1/admin/models", nil, nil, &models); err != nil {
		tp.failed(w, r, s, err)
		return
	}
	p.Tenants, p.Models, p.Keys, p.Audit = ts.Data, models.Data, keys.Data, audit.Data
	tp.renderStatus(w, r, status, "tenants", tp.data(r, s, "Tenants", "tenants", pageData{Page: p, Error: formError}))
}

// formFailed re-renders the tenants page with a refused form's error (the
// API's, naming the field), or fails the page.
func (tp *tenantPages) formFailed(w http.ResponseWriter, r *http.Request, s session, err error) {
	var ae *apiError
	if errors.As(err, &ae) && ae.status < 500 && ae.status != http.StatusForbidden {
		msg := ae.body.Message
		if ae.body.Field != "" {
			msg = ae.body.Field + ": " + msg
		}
		tp.renderTenants(w, r, s, ae.status, nil, msg)
		return
	}
	tp.failed(w, r, s, err)
}

// createTenant creates a tenant from the page's form (POST /v1/admin/tenants).
func (tp *tenantPages) createTenant(w http.ResponseWriter, r *http.Request, s session) {
	body := map[string]any{"name": r.PostFormValue("name")}
	if !tp.formLimits(w, r, s, body, limitFields) {
		return
	}
	if err := tp.call(r.Context(), s.Key, http.MethodPost, "/v1/admin/tenants", nil, body, nil); err != nil {
		tp.formFailed(w, r, s, err)
		return
	}
	http.Redirect(w, r, Prefix+"/tenants?done=tenant-created", http.StatusSeeOther)
}

// limitFields are the settings the page's tenant forms set;
// modelLimitFields those of its model forms.
var (
	limitFields      = []string{"weight", "rpm", "tpm", "concurrency"}
	modelLimitFields = []string{"rpm", "tpm", "concurrency"}
)

// formLimits reads fields from the form into body ("" leaves a field
// out); false when one is not a number (the page is rendered with the
// error).
func (tp *tenantPages) formLimits(w http.ResponseWriter, r *http.Request, s session, body map[string]any, fields []string) bool {
	for _, f := range fields {
		v := strings.TrimSpace(r.PostFormValue(f))
		if v == "" {
			delete(body, f)
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			tp.renderTenants(w, r, s, http.StatusBadRequest, nil, f+": "+strconv.Quote(v)+" is not a number")
			return false
		}
		body[f] = n
	}
	return true
}

// editTenant sets a tenant's weight and limits from the page's form, its
// other settings kept, if it is still the version the page showed
// (If-Match: a change made since is refused, not overwritten).
func (tp *tenantPages) editTenant(w http.ResponseWriter, r *http.Request, s session) {
	path := "/v1/admin/tenants/" + url.PathEscape(r.PathValue("tenant"))
	var body map[string]any
	if err := tp.call(r.Context(), s.Key, http.MethodGet, path, nil, nil, &body); err != nil {
		tp.formFailed(w, r, s, err)
		return
	}
	for _, f := range []string{"name", "projects", "version", "updated_at"} {
		delete(body, f)
	}
	if !tp.formLimits(w, r, s, body, limitFields) {
		return
	}
	ifMatch := `"` + r.PostFormValue("version") + `"`
	if err := tp.callIfMatch(r.Context(), s.Key, http.MethodPut, path, ifMatch, body); err != nil {
		tp.formFailed(w, r, s, err)
		return
	}
	http.Redirect(w, r, Prefix+"/tenants?done=tenant-updated", http.StatusSeeOther)
}

// editModel sets a model's rpm, tpm and concurrency from the page's form
// (the model named by its field model), its other settings kept, if it
// is still the version the page showed (If-Match).
func (tp *tenantPages) editModel(w http.ResponseWriter, r *http.Request, s session) {
	path := "/v1/admin/models/" + url.PathEscape(r.PostFormValue("model"))
	var body map[string]any
	if err := tp.call(r.Context(), s.Key, http.MethodGet, path, nil, nil, &body); err != nil {
		tp.formFailed(w, r, s, err)
		return
	}
	for _, f := range []string{"name", "version", "updated_at"} {
		delete(body, f)
	}
	if !tp.formLimits(w, r, s, body, modelLimitFields) {
		return
	}
	if err := tp.callIfMatch(r.Context(), s.Key, http.MethodPut, path, `"`+r.PostFormValue("version")+`"`, body); err != nil {
		tp.formFailed(w, r, s, err)
		return
	}
	http.Redirect(w, r, Prefix+"/tenants?done=model-updated", http.StatusSeeOther)
}

// createKey creates a key from the page's form and shows it, this once.
func (tp *tenantPages) createKey(w http.ResponseWriter, r *http.Request, s session) {
	body := map[string]any{"name": r.PostFormValue("name"), "tenant": r.PostFormValue("tenant")}
	if v := strings.TrimSpace(r.PostFormValue("expires_days")); v != "" {
		days, err := strconv.Atoi(v)
		if err != nil {
			tp.renderTenants(w, r, s, http.StatusBadRequest, nil, "expires_days: "+strconv.Quote(v)+" is not a number of days")
			return
		}
		body["expires_at"] = tp.clock.Now().Add(time.Duration(days) * 24 * time.Hour)
	}
	var k api.AdminKey
	if err := tp.call(r.Context(), s.Key, http.MethodPost, "/v1/admin/keys", nil, body, &k); err != nil {
		tp.formFailed(w, r, s, err)
		return
	}
	tp.renderTenants(w, r, s, http.StatusCreated, &k, "")
}

// revokeKey revokes a key (POST /v1/admin/keys/{key}/revoke).
func (tp *tenantPages) revokeKey(w http.ResponseWriter, r *http.Request, s session) {
	path := "/v1/admin/keys/" + url.PathEscape(r.PathValue("key")) + "/revoke"
	if err := tp.call(r.Context(), s.Key, http.MethodPost, path, nil, nil, nil); err != nil {
		tp.failed(w, r, s, err)
		return
	}
	http.Redirect(w, r, Prefix+"/tenants?done=key-revoked", http.StatusSeeOther)
}

// pauseTenant pauses or resumes a tenant (POST, with the session's CSRF
// token, as every form).
func (tp *tenantPages) pauseTenant(w http.ResponseWriter, r *http.Request, s session) {
	action := r.PathValue("action")
	if action != "pause" && action != "resume" {
		tp.renderStatus(w, r, http.StatusNotFound, "error", tp.data(r, s, "Not found", "", pageData{Error: "No such action: " + action}))
		return
	}
	path := "/v1/admin/tenants/" + url.PathEscape(r.PathValue("tenant")) + "/" + action
	if err := tp.call(r.Context(), s.Key, http.MethodPost, path, nil, nil, nil); err != nil {
		tp.failed(w, r, s, err)
		return
	}
	http.Redirect(w, r, Prefix+"/tenants?done="+action+"d", http.StatusSeeOther)
}
