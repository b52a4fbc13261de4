package console

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmq/llmq/internal/app/api"
)

// Prefix is where the console is mounted on the API's address.
const Prefix = "/ui"

// Defaults of Config.
const (
	// SessionTTLDefault is how long a sign-in lasts.
	SessionTTLDefault = 12 * time.Hour
	// RefreshDefault is how often the live parts of a page poll.
	RefreshDefault = 2 * time.Second
	// SecretMinBytes is the shortest Config.Secret accepted.
	SecretMinBytes = 32
)

// htmxVersion is the vendored htmx (static/README.md says how to update).
const htmxVersion = "2.0.11"

// ContentSecurityPolicy is sent with every page: scripts and styles from the
// console's own files only (no inline script or style, no eval), images
// from itself or data: URLs, forms posted to itself, never framed.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// Config configures the console.
type Config struct {
	// API is the JSON API's handler. Every number on a page is what it
	// answers to the session's key: the console reads nothing else.
	// Required.
	API http.Handler
	// Secret seals the session cookies and signs the CSRF tokens, at least
	// SecretMinBytes bytes: the same on every replica behind one address.
	// "" = a random secret per process (sessions end with it).
	Secret string
	// Secure marks every cookie Secure, for a proxy that terminates TLS
	// without saying so. false = Secure when the request came over TLS or
	// through a proxy that says it did (X-Forwarded-Proto: https).
	Secure bool
	// SessionTTL is how long a sign-in lasts. 0 = SessionTTLDefault.
	SessionTTL time.Duration
	// Refresh is how often the live parts of a page poll. 0 =
	// RefreshDefault.
	Refresh time.Duration

	// Logger receives the errors of pages. nil = slog.Default().
	Logger *slog.Logger
	// Clock dates sessions and "ago" times. nil = the system clock.
	Clock clockwork.Clock
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.SessionTTL = cmp.Or(c.SessionTTL, SessionTTLDefault)
	c.Refresh = cmp.Or(c.Refresh, RefreshDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.API == nil {
		errs = append(errs, errors.New("console: Config.API is required"))
	}
	if c.Secret != "" && len(c.Secret) < SecretMinBytes {
		errs = append(errs, fmt.Errorf("console: Config.Secret must be at least %d bytes", SecretMinBytes))
	}
	if c.SessionTTL < time.Minute {
		errs = append(errs, errors.New("console: Config.SessionTTL must be at least a minute"))
	}
	if c.Refresh < 500*time.Millisecond {
		errs = append(errs, errors.New("console: Config.Refresh must be at least 500ms"))
	}
	return errors.Join(errs...)
}

//go:embed static
var staticFS embed.FS

//go:embed templates
var templateFS embed.FS

// Console is the web console's handler, for the paths under Prefix. It is
// safe for concurrent use.
type Console struct {
	cfg Config
	// view renders pages and calls the API for them (and for sign-in).
	*view
	static  map[string]asset
	handler http.Handler
}

// view is what every page shares: the API it calls with the session's
// key, the templates it renders, the session's seal (its CSRF token).
type view struct {
	log   *slog.Logger
	seal  *sealer
	pages map[string]*template.Template
	api   http.Handler
	clock clockwork.Clock
	// refresh is Config.Refresh; secure is Config.Secure.
	refresh time.Duration
	secure  bool
}

// The pages, a type per part of the console, each rendering through the
// view: the overview, jobs and usage; the dead letters; the provider
// batches; the tenants, keys and models.
type (
	jobPages        struct{ *view }
	deadLetterPages struct{ *view }
	batchPages      struct{ *view }
	tenantPages     struct{ *view }
)

// asset is an embedded file with its fingerprint (pages link to
// name?v=<hash>, so a browser may cache it for long).
type asset struct {
	body  []byte
	ctype string
	hash  string
}

// New returns the console.
func New(cfg Config) (*Console, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	secret := []byte(cfg.Secret)
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	seal, err := newSealer(secret)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c := &Console{cfg: cfg, static: map[string]asset{}, view: &view{log: cfg.Logger, seal: seal, api: cfg.API,
		clock: cfg.Clock, refresh: cfg.Refresh, secure: cfg.Secure}}
	for name, ctype := range map[string]string{"htmx.min.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"} {
		b, err := fs.ReadFile(staticFS, "static/"+name)
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		sum := sha256.Sum256(b)
		c.static[name] = asset{body: b, ctype: ctype, hash: hex.EncodeToString(sum[:6])}
	}
	if c.pages, err = c.parsePages(); err != nil {
		return nil, err
	}
	c.handler = c.routes()
	return c, nil
}

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	page := func(pattern string, h func(http.ResponseWriter, *http.Request, session)) {
		mux.Handle(pattern, c.signedIn(h))
	}
	mux.HandleFunc("GET "+Prefix+"/static/{name}", c.serveStatic)
	mux.HandleFunc("GET "+Prefix+"/login", c.loginPage)
	mux.HandleFunc("POST "+Prefix+"/login", c.login)
	page("POST "+Prefix+"/logout", c.logout)
	jp, dp, bp, tp := jobPages{c.view}, deadLetterPages{c.view}, batchPages{c.view}, tenantPages{c.view}
	page("GET "+Prefix+"/{$}", jp.overview)
	page("GET "+Prefix+"/live/overview", jp.overviewLive)
	page("GET "+Prefix+"/jobs", jp.jobs)
	page("GET "+Prefix+"/live/jobs", jp.jobsLive)
	page("GET "+Prefix+"/jobs/{id}", jp.job)
	page("GET "+Prefix+"/live/jobs/{id}", jp.jobLive)
	page("POST "+Prefix+"/jobs/{id}/cancel", jp.cancelJob)
	page("POST "+Prefix+"/jobs/{id}/notifications/{event}/replay", jp.replayNotification)
	page("GET "+Prefix+"/dead-letters", dp.deadLetters)
	page("GET "+Prefix+"/dead-letters/{id}", dp.deadLetter)
	page("POST "+Prefix+"/dead-letters/replay", dp.replay)
	page("POST "+Prefix+"/dead-letters/purge", dp.purge)
	page("POST "+Prefix+"/dead-letters/replay-events", dp.replayEvents)
	page("GET "+Prefix+"/usage", jp.usage)
	page("GET "+Prefix+"/batches", bp.batches)
	page("GET "+Prefix+"/batches/{id}", bp.batch)
	page("POST "+Prefix+"/batches/{id}/cancel", bp.cancelBatch)
	page("GET "+Prefix+"/tenants", tp.tenants)
	page("POST "+Prefix+"/tenants", tp.createTenant)
	page("POST "+Prefix+"/tenants/{tenant}/limits", tp.editTenant)
	page("POST "+Prefix+"/models/limits", tp.editModel)
	page("POST "+Prefix+"/tenants/{tenant}/{action}", tp.pauseTenant)
	page("POST "+Prefix+"/keys", tp.createKey)
	page("POST "+Prefix+"/keys/{key}/revoke", tp.revokeKey)
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		c.renderStatus(w, r, http.StatusNotFound, "login", pageData{Title: "Not found",
			Error: "There is no such page in the console. Go to " + Prefix + "/ for the overview."})
	})
	// Forms are also checked against cross-origin posts by the browser's
	// Sec-Fetch-Site / Origin headers, besides their CSRF tokens.
	return http.NewCrossOriginProtection().Handler(mux)
}

// ServeHTTP serves the console's paths: Prefix and below.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
	if r.URL.Path == Prefix {
		http.Redirect(w, r, Prefix+"/", http.StatusFound)
		return
	}
	// The API's calls made for this request count against its client.
	c.handler.ServeHTTP(w, r.WithContext(api.WithClient(r.Context(), r)))
}

// serveStatic serves an embedded asset; cached for a day, a week when
// fingerprinted.
func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	a, ok := c.static[r.PathValue("name")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("Cache-Control", "public, max-age=86400")
	if r.URL.Query().Get("v") == a.hash {
		w.Header().Set("Cache-Control", "public, max-age=604800, immutable")
	}
	_, _ = w.Write(a.body)
}

// signedIn runs h with the request's session, or sends the browser to
// the sign-in page (a live fragment answers 401 with HX-Redirect).
func (c *Console) signedIn(h func(http.ResponseWriter, *http.Request, session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		s, ok := c.sessionOf(r)
		if !ok {
			c.toLogin(w, r)
			return
		}
		if r.Method == http.MethodPost && !c.seal.checkToken("session:"+s.ID, r.PostFormValue("csrf")) {
			c.renderStatus(w, r, http.StatusForbidden, "login", pageData{Title: "Refused",
				Error: "This form is out of date or was not sent by the console (CSRF token missing or wrong). Reload the page and try again."})
			return
		}
		h(w, r, s)
	})
}

// toLogin sends the browser to the sign-in page.
func (vw *view) toLogin(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("HX-Redirect", Prefix+"/login")
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

// errUnauthorized: the API refused the session's key (revoked since the
// sign-in).
var errUnauthorized = errors.New("console: the API refused the key")

// apiError is an error answer of the API.
type apiError struct {
	status int
	body   api.Error
}

func (e *apiError) Error() string {
	return fmt.Sprintf("API %d %s: %s", e.status, e.body.Code, e.body.Message)
}

// call sends one request to the API in process with the session's key and
// decodes the answer into out. An error answer is an *apiError;
// errUnauthorized when the key is refused.
func (vw *view) call(ctx context.Context, key, method, path string, query url.Values, body any, out any) error {
	return vw.callWith(ctx, key, method, path, query, nil, body, out)
}

// callIfMatch is call of an update that names the version it read.
func (vw *view) callIfMatch(ctx context.Context, key, method, path, ifMatch string, body any) error {
	return vw.callWith(ctx, key, method, path, nil, http.Header{"If-Match": {ifMatch}}, body, nil)
}

// callWith is call with header added to the request.
func (vw *view) callWith(ctx context.Context, key, method, path string, query url.Values, header http.Header, body any, out any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	target := path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	vw.api.ServeHTTP(rec, req)
	if rec.status == http.StatusUnauthorized {
		return errUnauthorized
	}
	if rec.status >= 300 {
		var e struct {
			Error api.Error `json:"error"`
		}
		if json.Unmarshal(rec.body.Bytes(), &e) != nil || e.Error.Message == "" {
			e.Error = api.Error{Code: "unexpected", Message: http.StatusText(rec.status)}
		}
		return &apiError{status: rec.status, body: e.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
		return fmt.Errorf("console: decode %s %s: %w", method, path, err)
	}
	return nil
}

// recorder is the in-process response of the API.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}

// failed answers a page whose API call failed: back to the sign-in page
// for a refused key, the API's own message for an error answer (with its
// status), a plain 500 otherwise.
func (vw *view) failed(w http.ResponseWriter, r *http.Request, s session, err error) {
	var ae *apiError
	switch {
	case errors.Is(err, errUnauthorized):
		http.SetCookie(w, vw.cookie(r, sessionCookie, "", -1))
		vw.toLogin(w, r)
	case errors.As(err, &ae):
		vw.renderStatus(w, r, ae.status, "error", vw.data(r, s, "Error", "", pageData{Error: ae.body.Message}))
	default:
		vw.log.Error("console: page failed", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		vw.renderStatus(w, r, http.StatusInternalServerError, "error", vw.data(r, s, "Error", "",
			pageData{Error: "The page could not be built: the server log says why."}))
	}
}

// pageData is what every template gets.
type pageData struct {
	Title string
	// Nav is the active section: overview, jobs, dead-letters, batches.
	Nav      string
	Signed   bool
	Operator bool
	Tenant   string
	CSRF     string
	Notice   string
	Error    string
	// Refresh is the polling period of the live parts, as htmx writes it;
	// RefreshText as people do.
	Refresh, RefreshText string
	// Now is when the page was built.
	Now time.Time
	// Page is the page's own data.
	Page any
}

// data fills the common fields of a page for session s.
func (vw *view) data(r *http.Request, s session, title, nav string, d pageData) pageData {
	d.Title, d.Nav, d.Signed, d.Operator, d.Tenant = title, nav, true, s.Operator, s.Tenant
	d.CSRF = vw.seal.token("session:" + s.ID)
	d.Refresh = fmt.Sprintf("every %dms", vw.refresh.Milliseconds())
	d.RefreshText = dur(vw.refresh)
	d.Now = vw.clock.Now()
	if d.Notice == "" {
		d.Notice = notice(r.URL.Query())
	}
	return d
}

// render writes a page (or a fragment: a template of the page's set).
func (vw *view) render(w http.ResponseWriter, r *http.Request, name string, d pageData) {
	vw.renderStatus(w, r, http.StatusOK, name, d)
}

func (vw *view) renderStatus(w http.ResponseWriter, _ *http.Request, status int, name string, d pageData) {
	page, frag, _ := strings.Cut(name, "#")
	t, ok := vw.pages[page]
	if !ok {
		vw.log.Error("console: no template", slog.String("name", name))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	entry := "layout"
	if frag != "" {
		entry = frag
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, entry, d); err != nil {
		vw.log.Error("console: render", slog.String("name", name), slog.String("error", err.Error()))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
