package api

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"
)

// Defaults of RateLimitConfig.
const (
	// KeyRPMDefault is the requests per minute of one API key.
	KeyRPMDefault = 6000
	// TenantRPMDefault is the requests per minute of one tenant, all its
	// keys together.
	TenantRPMDefault = 12000
	// AuthFailuresPerMinuteDefault is the failed authentications allowed
	// per minute from one client address.
	AuthFailuresPerMinuteDefault = 30
	// RateLimitClientsDefault is how many client addresses the API keeps
	// a failure count for.
	RateLimitClientsDefault = 10000
)

// Error codes of the door's limits.
const (
	// CodeRateLimited answers a request over a requests-per-minute limit
	// or from an address throttled for failed authentications.
	CodeRateLimited = "rate_limit_exceeded"
	// CodeTooManyWaiting answers a gateway call of a tenant that has
	// Gateway.MaxWaiting calls waiting already.
	CodeTooManyWaiting = "too_many_waiting_calls"
)

// RateLimitConfig bounds the requests at the API's door, as providers do
// (see docs/design/gateway.md). Each limit is a token bucket of one
// minute's requests, refilled continuously.
type RateLimitConfig struct {
	// KeyRPM is the requests per minute of one API key (operator keys
	// included). 0 = KeyRPMDefault; -1 = no limit.
	KeyRPM int
	// TenantRPM is the requests per minute of one tenant, all its keys
	// together. 0 = TenantRPMDefault; -1 = no limit.
	TenantRPM int
	// AuthFailuresPerMinute is the failed authentications allowed per
	// minute from one client address; past it, every request from the
	// address is refused until the bucket refills, before its key is
	// looked at. 0 = AuthFailuresPerMinuteDefault; -1 = no limit.
	AuthFailuresPerMinute int
	// TrustedProxyHeader names the header in which the proxy in front of
	// the API gives the client's address (X-Forwarded-For, X-Real-IP): its
	// last entry, the one that proxy added, is used. "" or a header
	// without an address: the connection's peer.
	TrustedProxyHeader string
	// MaxClients bounds the client addresses remembered (the least
	// recently seen forgotten first). 0 = RateLimitClientsDefault.
	MaxClients int
}

// limiterSet holds a token bucket of perMinute per name (a key's hash, a
// tenant, a client address); past size names the least recently used is
// forgotten, so that no caller can grow it without bound. A nil set
// limits nothing. It is safe for concurrent use. Its own takes are
// counted (took) for the replicas that share the limits (doorshare.go).
type limiterSet struct {
	perMinute int
	mu        sync.Mutex
	lru       *simplelru.LRU[string, *limiterEntry]
	// seen is the peers' Taken last applied, by replica and name.
	seen map[[2]string]int64
}

// limiterEntry is one name's bucket and what this replica let through of
// it: since it started, and by second over the last minute.
type limiterEntry struct {
	lim   *rate.Limiter
	taken int64
	sec   [60]int64 // the Unix second each slot counts
	count [60]int64
}

func newLimiterSet(perMinute, size int) *limiterSet {
	if perMinute < 0 {
		return nil
	}
	lru, _ := simplelru.NewLRU[string, *limiterEntry](size, nil) // size is positive
	return &limiterSet{perMinute: perMinute, lru: lru, seen: map[[2]string]int64{}}
}

// get returns name's limiter, added when create says so and it has none
// (nil otherwise).
func (s *limiterSet) get(name string, create bool) *rate.Limiter {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entry(name, create); e != nil {
		return e.lim
	}
	return nil
}

// entry is get's, with s.mu held.
func (s *limiterSet) entry(name string, create bool) *limiterEntry {
	if e, ok := s.lru.Get(name); ok || !create {
		return e
	}
	e := &limiterEntry{lim: rate.NewLimiter(rate.Limit(float64(s.perMinute)/60), s.perMinute)}
	s.lru.Add(name, e)
	return e
}

// take takes one token of each limiter at now, or none: it returns the
// index of the first limiter without one (-1 if all had) and the wait
// until it has. A nil limiter always has a token.
func take(now time.Time, lims ...*rate.Limiter) (int, time.Duration) {
	var taken []*rate.Reservation
	for i, l := range lims {
		if l == nil {
			continue
		}
		r := l.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			for _, t := range taken {
				t.CancelAt(now)
			}
			return i, d
		}
		taken = append(taken, r)
	}
	return -1, 0
}

// throttled returns the wait until l has a token, 0 when it has one now;
// it takes nothing.
func throttled(now time.Time, l *rate.Limiter) time.Duration {
	if l == nil {
		return 0
	}
	r := l.ReserveN(now, 1)
	defer r.CancelAt(now)
	return r.DelayFrom(now)
}

// setLimitHeaders writes the tightest of lims (the one with the fewest
// requests left; nil ones are no limit) at now as OpenAI's
// x-ratelimit-limit-requests, -remaining-requests and -reset-requests (the
// time until it is full again, a Go duration). The -tokens headers are
// setTokenHeaders'. docs/design/gateway.md.
func setLimitHeaders(h http.Header, now time.Time, lims ...*rate.Limiter) {
	var tight *rate.Limiter
	left := math.Inf(1)
	for _, l := range lims {
		if l == nil {
			continue
		}
		if n := l.TokensAt(now); n < left {
			tight, left = l, n
		}
	}
	if tight == nil {
		return
	}
	limit := float64(tight.Burst())
	perSec := float64(tight.Limit())
	left = max(0, left)
	reset := time.Duration(0)
	if perSec > 0 {
		reset = time.Duration((limit - left) / perSec * float64(time.Second)).Round(time.Millisecond)
	}
	h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(tight.Burst()))
	h.Set("X-Ratelimit-Remaining-Requests", strconv.FormatInt(int64(math.Floor(left)), 10))
	h.Set("X-Ratelimit-Reset-Requests", reset.String())
}

// setTokenHeaders writes tenant's TPM quota (Config.Tenants; a gateway
// call names no project, so the tenant's is the only token limit in force)
// as x-ratelimit-limit-tokens, -remaining-tokens (the quota less the
// tokens of the tenant's jobs that finished in the last minute, Usage) and
// -reset-tokens (the time the workers' bucket takes to refill those
// tokens, at most a minute). No quota, no Usage or a failed read: none.
func (dr *door) setTokenHeaders(ctx context.Context, h http.Header, tenant string) {
	tpm := dr.tenants()[tenant].TPM
	if tpm <= 0 || dr.usage == nil {
		return
	}
	used, err := dr.usage.Usage(ctx, tenant)
	if err != nil {
		dr.log.WarnContext(ctx, "api: the tenant's tokens of the last minute", "tenant", tenant, "err", err)
		return
	}
	var spent int64
	for _, u := range used {
		if u.Tenant == tenant {
			spent += u.MinuteTokens
		}
	}
	reset := min(time.Duration(float64(spent)/tpm*float64(time.Minute)), time.Minute).Round(time.Millisecond)
	h.Set("X-Ratelimit-Limit-Tokens", strconv.FormatInt(int64(tpm), 10))
	h.Set("X-Ratelimit-Remaining-Tokens", strconv.FormatInt(max(0, int64(tpm)-spent), 10))
	h.Set("X-Ratelimit-Reset-Tokens", reset.String())
}

// rateLimited answers 429 rate_limit_exceeded naming the limit.
func (dr *door) rateLimited(w http.ResponseWriter, fail func(http.ResponseWriter, int, Error), limit string, wait time.Duration, msg string) {
	dr.limited.WithLabelValues(limit).Inc()
	setRetryAfter(w, wait)
	fail(w, http.StatusTooManyRequests, Error{Code: CodeRateLimited,
		Message: fmt.Sprintf("%s: retry in %.0f s", msg, max(math.Ceil(wait.Seconds()), 1))})
}

type clientKey struct{}

// WithClient returns ctx carrying r as the client of the requests made
// in-process on its behalf (the console's): the API counts their failed
// authentications against r's address, not against the process's.
func WithClient(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, clientKey{}, r)
}

// clientAddr is the address failed authentications are counted by: the
// last entry of the trusted proxy's header when it holds an address, else
// the peer's. An IPv6 address counts as its /64, which one client holds
// whole.
func (dr *door) clientAddr(r *http.Request) string {
	if origin, ok := r.Context().Value(clientKey{}).(*http.Request); ok {
		r = origin
	}
	ip, ok := netip.Addr{}, false
	if h := dr.limits.TrustedProxyHeader; h != "" {
		if vals := r.Header.Values(h); len(vals) > 0 {
			last := vals[len(vals)-1]
			last = strings.TrimSpace(last[strings.LastIndexByte(last, ',')+1:])
			ip, ok = parseAddr(last)
		}
	}
	if !ok {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		if ip, ok = parseAddr(host); !ok {
			return r.RemoteAddr
		}
	}
	if ip = ip.Unmap(); ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// parseAddr reads an address, with or without a port.
func parseAddr(s string) (netip.Addr, bool) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip, true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), true
	}
	return netip.Addr{}, false
}

// waitingCalls counts each tenant's gateway calls waiting for their job.
// It is safe for concurrent use.
type waitingCalls struct {
	mu       sync.Mutex
	byTenant map[string]int
}

// enter counts a call of tenant unless it has max waiting already (max < 0:
// no bound); leave uncounts it.
func (wc *waitingCalls) enter(tenant string, max int) (leave func(), ok bool) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if max >= 0 && wc.byTenant[tenant] >= max {
		return nil, false
	}
	if wc.byTenant == nil {
		wc.byTenant = map[string]int{}
	}
	wc.byTenant[tenant]++
	return func() {
		wc.mu.Lock()
		defer wc.mu.Unlock()
		if wc.byTenant[tenant]--; wc.byTenant[tenant] == 0 {
			delete(wc.byTenant, tenant)
		}
	}, true
}
