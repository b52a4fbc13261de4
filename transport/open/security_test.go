package open_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/llmq/llmq/transport"
	"github.com/llmq/llmq/transport/kafka"
	"github.com/llmq/llmq/transport/open"
)

// testCA is a certificate authority and a server certificate it signed for
// 127.0.0.1; caFile is the CA in PEM.
type testCA struct {
	server tls.Certificate
	caFile string
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	caKey, srvKey := key(), key()
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "llmq test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kfake"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	return testCA{server: tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}, caFile: caFile}
}

// secureCluster is a one-broker kfake cluster that speaks TLS only and
// requires SASL, with one user per mechanism.
func secureCluster(t *testing.T, ca testCA) string {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1), kfake.DefaultNumPartitions(2), kfake.AllowAutoTopicCreation(),
		kfake.GroupMinSessionTimeout(kafka.EmbeddedMinSessionTimeout),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.server}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "pw-plain"),
		kfake.Superuser("SCRAM-SHA-256", "scram256-user", "pw-256"),
		kfake.Superuser("SCRAM-SHA-512", "scram512-user", "pw-512"),
	)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// roundTrip publishes one message through brokerURL and consumes it back
// through a second Open, then waits for the group's lag to be 0: the
// writer, the group, the partition readers and the lag probe all went
// through TLS and SASL.
func roundTrip(ctx context.Context, brokerURL string, getenv func(string) string) error {
	opts := open.Options{Logger: slog.New(slog.DiscardHandler), Getenv: getenv}
	pub, _, err := open.Open(ctx, brokerURL, opts)
	if err != nil {
		return err
	}
	defer pub.Close()
	target, err := open.Parse(brokerURL)
	if err != nil {
		return err
	}
	if err := pub.Publish(ctx, target.Dest, transport.Message{Value: []byte("secure")}); err != nil {
		return err
	}
	_, sub, err := open.Open(ctx, brokerURL, opts)
	if err != nil {
		return err
	}
	defer sub.Close()
	ch, err := sub.Consume(ctx)
	if err != nil {
		return err
	}
	select {
	case m := <-ch:
		if string(m.Value) != "secure" {
			return errors.New("unexpected message " + string(m.Value))
		}
		if err := m.Ack(ctx); err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		lag, err := sub.Depth(ctx)
		if err == nil && lag == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestKafkaTLSAndSASL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a few seconds of kfake")
	}
	ca := newTestCA(t)
	addr := secureCluster(t, ca)
	noEnv := func(string) string { return "" }
	for _, tc := range []struct {
		name, url string
		getenv    func(string) string
	}{
		{"plain", "kafka://plain-user:pw-plain@" + addr + "/plain?group=g&sasl=plain&tls_ca=" + ca.caFile, noEnv},
		{"scram-sha-256", "kafka://scram256-user:pw-256@" + addr + "/s256?group=g&sasl=scram-sha-256&tls_ca=" + ca.caFile, noEnv},
		{"scram-sha-512 from env", "kafka://" + addr + "/s512?group=g&sasl=scram-sha-512&tls=true&tls_ca=" + ca.caFile,
			func(k string) string {
				return map[string]string{open.EnvKafkaUsername: "scram512-user", open.EnvKafkaPassword: "pw-512"}[k]
			}},
		{"insecure skip verify", "kafka://scram256-user:pw-256@" + addr + "/skip?group=g&sasl=scram-sha-256&tls_insecure_skip_verify=true", noEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, roundTrip(ctx, tc.url, tc.getenv))
		})
	}
	for _, tc := range []struct{ name, url string }{
		{"wrong password", "kafka://scram256-user:nope@" + addr + "/t?sasl=scram-sha-256&tls_ca=" + ca.caFile},
		{"unknown CA", "kafka://scram256-user:pw-256@" + addr + "/t?sasl=scram-sha-256&tls=true"},
		{"no TLS", "kafka://scram256-user:pw-256@" + addr + "/t?sasl=scram-sha-256"},
		{"no SASL", "kafka://" + addr + "/t?tls_ca=" + ca.caFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			require.Error(t, roundTrip(ctx, tc.url, noEnv))
		})
	}
}
