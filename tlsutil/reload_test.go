package tlsutil

import (
	"os"
	"strings"
	"sync"
	"testing"
)

// rewrite replaces the contents of dst with those of src, as an operator's
// certificate rotation does.
func rewrite(t *testing.T, dst, src string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, dst, data, 0o600)
}

func TestReload_NewConnectionSeesNewCertOldConnectionKeepsWorking(t *testing.T) {
	p := mustNewPKI(t)
	serverCfg := p.config(RoleServer, true)
	server := mustNewConfigurator(t, serverCfg)
	client := p.mustConfigurator(RoleClient, true)
	s := mustStartServer(t, server.IncomingConfig())

	old := mustDial(t, s.addr, client.OutgoingConfig())
	oldSerial := old.ConnectionState().PeerCertificates[0].SerialNumber

	newCert, newKey := p.mustCert(RoleServer, "")
	rewrite(t, serverCfg.CertFile, newCert)
	rewrite(t, serverCfg.KeyFile, newKey)
	if err := server.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	newSerial := mustParseCertFile(t, newCert).SerialNumber
	if got := server.Certificate().SerialNumber; got.Cmp(newSerial) != 0 {
		t.Fatalf("Certificate: exp: serial %x got: %x", newSerial, got)
	}

	c := mustDial(t, s.addr, client.OutgoingConfig())
	if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(newSerial) != 0 {
		t.Fatalf("new connection: exp: serial %x got: %x (old %x)", newSerial, got, oldSerial)
	}
	if err := roundTrip(old); err != nil {
		t.Fatalf("existing connection after Reload: %v", err)
	}
}

func TestReload_BrokenFileKeepsOldCert(t *testing.T) {
	p := mustNewPKI(t)
	serverCfg := p.config(RoleServer, true)
	server := mustNewConfigurator(t, serverCfg)
	client := p.mustConfigurator(RoleClient, true)
	s := mustStartServer(t, server.IncomingConfig())
	oldSerial := server.Certificate().SerialNumber

	// A new certificate whose key has not been copied yet: the pair does
	// not match. Then a truncated certificate.
	newCert, _ := p.mustCert(RoleServer, "")
	rewrite(t, serverCfg.CertFile, newCert)
	err := server.Reload()
	if err == nil || !strings.Contains(err.Error(), serverCfg.KeyFile) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("exp: error naming %s got: %v", serverCfg.KeyFile, err)
	}
	assertNoKeyMaterial(t, err, p.dir)
	mustWrite(t, serverCfg.CertFile, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n"), 0o644)
	err = server.Reload()
	if err == nil || !strings.Contains(err.Error(), serverCfg.CertFile) {
		t.Fatalf("exp: error naming %s got: %v", serverCfg.CertFile, err)
	}

	if got := server.Certificate().SerialNumber; got.Cmp(oldSerial) != 0 {
		t.Fatalf("Certificate: exp: old serial %x got: %x", oldSerial, got)
	}
	c := mustDial(t, s.addr, client.OutgoingConfig())
	if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(oldSerial) != 0 {
		t.Fatalf("exp: old serial %x got: %x", oldSerial, got)
	}
}

// A reloaded CA file applies to the next handshake on both sides: the
// incoming side through GetConfigForClient, the outgoing side through
// VerifyConnection.
func TestReload_CAPoolAppliesToNewConnections(t *testing.T) {
	oldCA := mustNewPKI(t)
	newCA := mustNewPKI(t)
	serverCfg := oldCA.config(RoleServer, true)
	server := mustNewConfigurator(t, serverCfg)
	s := mustStartServer(t, server.IncomingConfig())
	clientCfg := oldCA.config(RoleClient, true)
	client := mustNewConfigurator(t, clientCfg)
	mustDial(t, s.addr, client.OutgoingConfig())
	s.nextState(t)

	// The server moves to the new CA; the client still trusts only the old.
	newCert, newKey := newCA.mustCert(RoleServer, "")
	rewrite(t, serverCfg.CAFile, newCA.caFile)
	rewrite(t, serverCfg.CertFile, newCert)
	rewrite(t, serverCfg.KeyFile, newKey)
	if err := server.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	outgoing := client.OutgoingConfig() // made before the client's reload
	if _, err := dial(t, s.addr, outgoing); err == nil {
		t.Fatal("exp: old-CA client refuses new-CA server got: accepted")
	}
	s.nextErr(t)

	// The client moves too; the config made earlier follows it.
	newClientCert, newClientKey := newCA.mustCert(RoleClient, "")
	rewrite(t, clientCfg.CAFile, newCA.caFile)
	rewrite(t, clientCfg.CertFile, newClientCert)
	rewrite(t, clientCfg.KeyFile, newClientKey)
	if err := client.Reload(); err != nil {
		t.Fatalf("client Reload: %v", err)
	}
	mustDial(t, s.addr, outgoing)
	s.nextState(t)

	// A client still holding an old-CA certificate is now refused.
	stale := mustNewConfigurator(t, oldCA.config(RoleClient, false))
	if _, err := dial(t, s.addr, stale.OutgoingConfig()); err == nil {
		t.Fatal("exp: old-CA client certificate refused got: accepted")
	}
}

// Handshakes racing reloads: under -race this checks the concurrency
// contract, and every connection must succeed with one of the two
// certificates the server alternates between.
func TestReload_ConcurrentWithHandshakes(t *testing.T) {
	p := mustNewPKI(t)
	serverCfg := p.config(RoleServer, true)
	server := mustNewConfigurator(t, serverCfg)
	client := p.mustConfigurator(RoleClient, true)
	s := mustStartServer(t, server.IncomingConfig())
	certA, keyA := p.mustCert(RoleServer, "")
	certB, keyB := p.mustCert(RoleServer, "")
	serials := map[string]bool{ // the first certificate, A and B
		server.Certificate().SerialNumber.String():        true,
		mustParseCertFile(t, certA).SerialNumber.String(): true,
		mustParseCertFile(t, certB).SerialNumber.String(): true,
	}

	const dialers, dials = 4, 10 // 40 handshakes: within testServer's buffers
	var wg sync.WaitGroup
	errs := make(chan error, dialers*dials)
	got := make(chan string, dialers*dials)
	start := make(chan struct{})
	for range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := client.OutgoingConfig()
			<-start
			for range dials {
				c, err := dial(t, s.addr, cfg)
				if err != nil {
					errs <- err
					continue
				}
				got <- c.ConnectionState().PeerCertificates[0].SerialNumber.String()
			}
		}()
	}
	close(start)
	for i := range 10 {
		cert, key := certA, keyA
		if i%2 == 1 {
			cert, key = certB, keyB
		}
		rewrite(t, serverCfg.CertFile, cert)
		rewrite(t, serverCfg.KeyFile, key)
		if err := server.Reload(); err != nil {
			t.Errorf("Reload: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	close(got)
	for err := range errs {
		t.Errorf("handshake during Reload: %v", err)
	}
	for serial := range got {
		if !serials[serial] {
			t.Errorf("exp: serial of the first cert, A or B got: %s", serial)
		}
	}
}
