package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Cookie names. Both are scoped to Prefix, HttpOnly and SameSite=Strict.
const (
	// sessionCookie holds the sealed session.
	sessionCookie = "llmq_session"
	// loginCookie holds the nonce the sign-in form's CSRF token is bound
	// to, before there is a session.
	loginCookie = "llmq_login"
)

// session is what the sealed cookie carries. The API key is in it, so the
// cookie is sealed (AES-256-GCM) and never readable by a script (HttpOnly).
type session struct {
	// Key is the API key the console calls the API with.
	Key string `json:"k"`
	// ID names the session; the CSRF token is its MAC.
	ID string `json:"i"`
	// Issued is when the user signed in (Unix seconds).
	Issued int64 `json:"t"`
	// Tenant is the key's tenant, "" for an operator (from GET /v1/me).
	Tenant   string `json:"n,omitempty"`
	Operator bool   `json:"o,omitempty"`
}

// sealer seals sessions and signs CSRF tokens with keys derived from one
// secret.
type sealer struct {
	aead cipher.AEAD
	mac  []byte
}

func newSealer(secret []byte) (*sealer, error) {
	encKey, err := hkdf.Key(sha256.New, secret, nil, "llmq console session", 32)
	if err != nil {
		return nil, err
	}
	macKey, err := hkdf.Key(sha256.New, secret, nil, "llmq console csrf", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(encKey)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead, mac: macKey}, nil
}

// seal encrypts s: base64url(nonce || ciphertext).
func (k *sealer) seal(s session) (string, error) {
	plain, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(k.aead.Seal(nonce, nonce, plain, []byte(sessionCookie))), nil
}

var errBadSession = errors.New("console: session cookie does not open")

// open decrypts a sealed session.
func (k *sealer) open(v string) (session, error) {
	var s session
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(raw) < k.aead.NonceSize() {
		return s, errBadSession
	}
	n := k.aead.NonceSize()
	plain, err := k.aead.Open(nil, raw[:n], raw[n:], []byte(sessionCookie))
	if err != nil {
		return s, errBadSession
	}
	if err := json.Unmarshal(plain, &s); err != nil || s.Key == "" || s.ID == "" {
		return s, errBadSession
	}
	return s, nil
}

// token is the CSRF token of a purpose ("session:<id>" or "login:<nonce>").
func (k *sealer) token(purpose string) string {
	m := hmac.New(sha256.New, k.mac)
	m.Write([]byte(purpose))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkToken compares a form's token with the expected one in constant
// time.
func (k *sealer) checkToken(purpose, got string) bool {
	return got != "" && hmac.Equal([]byte(k.token(purpose)), []byte(got))
}

// randomID is 16 random bytes, base64url.
func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// cookie is a console cookie for an answer to r: HttpOnly,
// SameSite=Strict, on Prefix, Secure under TLS (overTLS); maxAge < 0
// deletes it.
func (vw *view) cookie(r *http.Request, name, value string, maxAge time.Duration) *http.Cookie {
	ck := &http.Cookie{Name: name, Value: value, Path: Prefix, HttpOnly: true, Secure: vw.secure || overTLS(r),
		SameSite: http.SameSiteStrictMode}
	if maxAge < 0 {
		ck.MaxAge = -1
	} else {
		ck.MaxAge = int(maxAge / time.Second)
	}
	return ck
}

// overTLS reports whether r came over TLS, to this server or to a proxy
// in front that says so (the first X-Forwarded-Proto is https). The header
// needs no trusted proxy: it can only add Secure, which a browser on plain
// HTTP refuses, so a forged one costs its sender's own sign-in, nobody
// else's cookie.
func overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

// sessionOf opens the request's session; false when there is none, it does
// not open, or it is older than the session's lifetime.
func (c *Console) sessionOf(r *http.Request) (session, bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return session{}, false
	}
	s, err := c.seal.open(ck.Value)
	if err != nil {
		return session{}, false
	}
	issued := time.Unix(s.Issued, 0)
	if now := c.cfg.Clock.Now(); now.Sub(issued) > c.cfg.SessionTTL || issued.After(now.Add(time.Minute)) {
		return session{}, false
	}
	return s, true
}
