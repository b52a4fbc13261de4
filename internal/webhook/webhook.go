package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TimeoutDefault bounds one delivery (Config.Timeout).
const TimeoutDefault = 10 * time.Second

// AnyTenant is the key of Config.Secrets whose secrets sign the events of
// tenants without their own.
const AnyTenant = "*"

// ErrRefusedAddress is wrapped by a Send error when the webhook's host
// resolves to an address Config.AllowPrivate does not allow.
var ErrRefusedAddress = errors.New("webhook: address refused (loopback, private, link-local, multicast or unspecified)")

// ErrNoSecret is wrapped by a Send error when neither the tenant nor
// AnyTenant has a secret.
var ErrNoSecret = errors.New("webhook: no signing secret for the tenant")

// Config configures a Sender.
type Config struct {
	// Secrets are the signing secrets per tenant (AnyTenant: the others),
	// each "whsec_" + base64 as Standard Webhooks writes them: one, or two
	// while rotating (every delivery is signed with both, so a receiver
	// that knows either accepts it). Required for each tenant that
	// receives webhooks.
	Secrets map[string][]string
	// AllowPrivate lets webhooks reach loopback, private and link-local
	// addresses (a deployment whose receivers are internal). Default
	// false: refused at dial time.
	AllowPrivate bool
	// Timeout bounds one delivery (default TimeoutDefault).
	Timeout time.Duration
	// TLS, when set, is the client's TLS configuration (tests trust their
	// own server with it); nil: the system's roots.
	TLS *tls.Config
}

// Sender posts signed result events. Safe for concurrent use.
type Sender struct {
	client  *http.Client
	signers atomic.Pointer[map[string][]*standardwebhooks.Webhook]
}

// New returns a sender, or an error naming the secret that does not
// decode.
func New(cfg Config) (*Sender, error) {
	s := &Sender{}
	if err := s.SetSecrets(cfg.Secrets); err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: cmp.Or(cfg.Timeout, TimeoutDefault)}
	if !cfg.AllowPrivate {
		dialer.Control = refusePrivate
	}
	tr := &http.Transport{
		Proxy:               nil, // a proxy would dial for us, past the address check
		DialContext:         dialer.DialContext,
		TLSClientConfig:     cfg.TLS,
		TLSHandshakeTimeout: cmp.Or(cfg.Timeout, TimeoutDefault),
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	s.client = &http.Client{
		Transport: tr,
		Timeout:   cmp.Or(cfg.Timeout, TimeoutDefault),
		// A redirect could lead a job's webhook anywhere: the 3xx answer
		// is the delivery's failure.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return s, nil
}

// refusePrivate is the dialer's check of the address it is about to
// connect to, after name resolution: nothing resolved later can slip by.
func refusePrivate(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrRefusedAddress, address)
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return fmt.Errorf("%w: %s", ErrRefusedAddress, host)
	}
	return nil
}

// Send posts payload to the webhook u for tenant's event eventID at at,
// signed with the tenant's secrets. Only a 2xx answer delivers it; any
// other answer, a redirect included, is an error.
func (s *Sender) Send(ctx context.Context, tenant, u, eventID string, at time.Time, payload []byte) error {
	all := *s.signers.Load()
	signers := all[tenant]
	if len(signers) == 0 {
		signers = all[AnyTenant]
	}
	if len(signers) == 0 {
		return fmt.Errorf("%w %q", ErrNoSecret, tenant)
	}
	if p, err := url.Parse(u); err != nil || p.Scheme != "https" {
		return fmt.Errorf("webhook: %q is not an https URL", u)
	}
	sigs := make([]string, len(signers))
	for i, wh := range signers {
		sig, err := wh.Sign(eventID, at, payload)
		if err != nil {
			return fmt.Errorf("webhook: sign: %w", err)
		}
		sigs[i] = sig
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(standardwebhooks.HeaderWebhookID, eventID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, strings.Join(sigs, " "))
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: post: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook: answered %s", resp.Status)
	}
	return nil
}

// SetSecrets replaces every tenant's signing secrets (as Config.Secrets)
// for the deliveries that follow; on an error, which names the tenant and
// the secret's place but never the secret, the secrets stay as they were.
func (s *Sender) SetSecrets(secrets map[string][]string) error {
	signers := make(map[string][]*standardwebhooks.Webhook, len(secrets))
	for tenant, list := range secrets {
		if len(list) == 0 || len(list) > 2 {
			return fmt.Errorf("webhook: secrets of tenant %q: want one or two (while rotating), got %d", tenant, len(list))
		}
		for i, sec := range list {
			wh, err := standardwebhooks.NewWebhook(sec)
			if err != nil {
				return fmt.Errorf("webhook: secret %d of tenant %q: %w", i, tenant, err)
			}
			signers[tenant] = append(signers[tenant], wh)
		}
	}
	s.signers.Store(&signers)
	return nil
}

// CloseIdleConnections closes the connections kept for the next
// deliveries.
func (s *Sender) CloseIdleConnections() { s.client.CloseIdleConnections() }
