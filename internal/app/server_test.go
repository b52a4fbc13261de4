package app_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmq/llmq/internal/app"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their files and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "llmq test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestAPIServesTLS: given a certificate and its key, the API serves HTTPS
// only; its metrics are on their own listener, not on the API's port.
func TestAPIServesTLS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	certFile, keyFile, pool := selfSigned(t)
	_, err := app.New(ctx, app.Config{Settings: settings(t), Logger: quiet,
		API: &app.APIConfig{Listen: "127.0.0.1:0", TLSCert: certFile}})
	require.ErrorContains(t, err, "TLSCert and TLSKey go together")

	a, err := app.New(ctx, app.Config{Settings: settings(t), Logger: quiet, MetricsListen: "127.0.0.1:0",
		API: &app.APIConfig{Listen: "127.0.0.1:0", TLSCert: certFile, TLSKey: keyFile}})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	defer func() { require.NoError(t, a.Stop(ctx)) }()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(c *http.Client, url string) (int, string) {
		resp, err := c.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, _ := get(client, "https://"+a.APIAddr().String()+"/healthz")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(client, "https://"+a.APIAddr().String()+"/metrics")
	require.Equal(t, http.StatusNotFound, code, "no metrics on the port tenants reach")
	code, body := get(http.DefaultClient, "http://"+a.MetricsAddr().String()+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `llmq_api_requests_total{code="200",route="GET /healthz"} 1`)
	code, _ = get(http.DefaultClient, "http://"+a.MetricsAddr().String()+"/healthz")
	require.Equal(t, http.StatusOK, code, "the metrics listener answers liveness probes")

	// Plain HTTP on the TLS port gets no answer.
	plain := &http.Client{Timeout: 5 * time.Second}
	resp, err := plain.Get("http://" + a.APIAddr().String() + "/healthz")
	if err == nil {
		resp.Body.Close()
		require.NotEqual(t, http.StatusOK, resp.StatusCode)
	}
}

// TestAPIServerTimeouts: an authenticated client that trickles its body is
// cut off after the read timeout instead of holding a connection open.
func TestAPIServerTimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := app.New(ctx, app.Config{Settings: settings(t), Logger: quiet,
		API: &app.APIConfig{Listen: "127.0.0.1:0", ReadTimeout: 300 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	defer func() { require.NoError(t, a.Stop(ctx)) }()
	conn, err := net.Dial("tcp", a.APIAddr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-acme\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"body\":")
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(start.Add(20*time.Second)))
	line, err := bufio.NewReader(conn).ReadString('\n')
	// The server answers the unfinished request (400) or closes the
	// connection, long before the client's own deadline.
	require.False(t, strings.Contains(fmt.Sprint(err), "i/o timeout"), "the server held the connection: %v", err)
	require.Less(t, time.Since(start), 10*time.Second, "answered %q", line)
}
