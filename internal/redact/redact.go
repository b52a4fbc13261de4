// Package redact hides credentials in what llmq prints. Every URL, connection
// string or key that reaches an error, a log line or a --help default goes
// through URL or Key, so no command prints a password.
//
// It is pure (no I/O, standard library only) so that every layer of the
// module may use it.
package redact

import (
	"net/url"
	"strings"
)

// Mask replaces a hidden secret; it is what net/url's URL.Redacted writes.
const Mask = "xxxxx"

// secretParams are the query parameters (and libpq connection-string
// keywords) whose values are credentials, lower-cased.
var secretParams = map[string]bool{
	"password": true, "passwd": true, "pass": true, "pwd": true, "sslpassword": true,
	"secret": true, "client_secret": true, "token": true, "access_token": true,
	"api_key": true, "apikey": true, "api-key": true, "key": true, "auth": true,
	"authorization": true, "signature": true, "sig": true,
}

// URL returns s with its credentials replaced by Mask and everything else
// as it was: the password of the user information
// (postgres://user:xxxxx@host/db), the values of query parameters that name
// a secret (?password=xxxxx, ?api_key=xxxxx) and, for a libpq key=value
// connection string, its password. It works on text that does not parse as
// a URL too (a bad escape in the password is a common reason to print one).
func URL(s string) string {
	if scheme := strings.Index(s, "://"); scheme >= 0 {
		return redactURL(s, scheme+len("://"))
	}
	if strings.Contains(s, "=") && !strings.ContainsAny(s, "?&") {
		return redactKeywords(s)
	}
	// user:pass@host without a scheme.
	if at := strings.LastIndex(s, "@"); at >= 0 {
		if user, _, ok := strings.Cut(s[:at], ":"); ok {
			return user + ":" + Mask + s[at:]
		}
	}
	return s
}

// redactURL masks the user information's password and the secret query
// parameters of s, whose authority starts at from.
func redactURL(s string, from int) string {
	rest := s[from:]
	// The user information ends at the last '@' of the authority, which
	// ends at the first '/', '?' or '#'. A password that was not escaped
	// may hold those too: when the authority has no '@' but the remainder
	// has, the last '@' is taken (at worst a port and a path are masked
	// with it; a password is never shown).
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		at = strings.LastIndex(rest, "@")
	}
	if at >= 0 {
		if colon := strings.Index(rest[:at], ":"); colon >= 0 {
			rest = rest[:colon+1] + Mask + rest[at:]
			at = colon + 1 + len(Mask)
		}
		end = at + 1
		if e := strings.IndexAny(rest[end:], "/?#"); e >= 0 {
			end += e
		} else {
			end = len(rest)
		}
	}
	q := strings.Index(rest[end:], "?")
	if q < 0 {
		return s[:from] + rest
	}
	q += end
	query, tail := rest[q+1:], ""
	if frag := strings.Index(query, "#"); frag >= 0 {
		query, tail = query[:frag], query[frag:]
	}
	return s[:from] + rest[:q+1] + redactQuery(query) + tail
}

// redactQuery masks the values of the secret parameters of a raw query,
// keeping the order and encoding of the others.
func redactQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		k, _, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if secretParams[strings.ToLower(name)] {
			parts[i] = k + "=" + Mask
		}
	}
	return strings.Join(parts, "&")
}

// redactKeywords masks the secret values of a libpq connection string
// ("host=db user=app password=secret"), quoted values included.
func redactKeywords(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			b.WriteString(s[i:])
			break
		}
		key := strings.TrimSpace(s[i : i+eq])
		if sp := strings.LastIndexAny(key, " \t"); sp >= 0 {
			key = key[sp+1:]
		}
		b.WriteString(s[i : i+eq+1])
		i += eq + 1
		// The value ends at the next unquoted space; '...' may quote it.
		j := i
		if j < len(s) && s[j] == '\'' {
			j++
			for j < len(s) && s[j] != '\'' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(s))
		} else {
			for j < len(s) && s[j] != ' ' && s[j] != '\t' {
				j++
			}
		}
		if secretParams[strings.ToLower(key)] {
			b.WriteString(Mask)
		} else {
			b.WriteString(s[i:j])
		}
		i = j
	}
	return b.String()
}

// Key returns an API key reduced to its first four characters and "…", so
// that an operator can tell keys apart in an error without reading them; a
// key shorter than 12 characters, of which four would be a third, is Mask.
func Key(k string) string {
	if len(k) < 12 {
		return Mask
	}
	return k[:4] + "…"
}

// Endpoint returns a URL reduced to its scheme and host, with "/…" for a
// path it hides: for the URLs whose path is the secret (a Slack webhook's
// https://hooks.slack.com/services/T0/B0/XXXX). A string that is not an
// absolute URL is Mask.
func Endpoint(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Scheme == "" || u.Host == "" {
		return Mask
	}
	out := u.Scheme + "://" + u.Host
	if strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		out += "/…"
	}
	return out
}
