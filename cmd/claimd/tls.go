package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/claimd/claimd/tlsutil"
)

// Fixed CA file names, so that the defaults of `tls cert create` find the
// CA that `tls ca create` wrote.
const (
	caCertFileName = "claimd-agent-ca.pem"
	caKeyFileName  = "claimd-agent-ca-key.pem"
)

func runTLSCACreate(args []string, stdout, stderr io.Writer) int {
	x := newCmd("tls ca create", stdout, stderr)
	days := x.fs.Int("days", 5*365, "days the CA is valid")
	dir := x.fs.String("dir", ".", "directory to write "+caCertFileName+" and "+caKeyFileName+" in")
	if _, ok := x.parse(args, noArgument); !ok {
		return 1
	}
	certPath := filepath.Join(*dir, caCertFileName)
	keyPath := filepath.Join(*dir, caKeyFileName)
	// Checked before generating, so the error names the file; writeNew
	// checks again without a race.
	for _, p := range []string{certPath, keyPath} {
		if exists(p) {
			return fail(stderr, "%s already exists; not overwriting a CA", p)
		}
	}
	ca, err := tlsutil.GenerateCA(*days)
	if err != nil {
		return fail(stderr, "%v", err)
	}
	if err := writeNew(certPath, ca.CertPEM, keyPath, ca.KeyPEM); err != nil {
		return fail(stderr, "%v", err)
	}
	fmt.Fprintf(stdout, "==> wrote %s\n==> wrote %s\n", certPath, keyPath)
	return 0
}

func runTLSCertCreate(args []string, stdout, stderr io.Writer) int {
	x := newCmd("tls cert create", stdout, stderr)
	fs := x.fs
	server := fs.Bool("server", false, "a server certificate (server.<region>.claimd)")
	client := fs.Bool("client", false, "a client agent certificate (client.<region>.claimd)")
	cli := fs.Bool("cli", false, "a CLI user's certificate (cli.<region>.claimd)")
	region := fs.String("region", tlsutil.DefaultRegion, "region in the certificate's role name")
	days := fs.Int("days", 365, "days the certificate is valid (never past the CA's expiry)")
	caFile := fs.String("ca", caCertFileName, "CA certificate to sign with")
	caKey := fs.String("key", caKeyFileName, "CA key to sign with")
	dir := fs.String("dir", ".", "directory to write the certificate and key in")
	var dnsNames []string
	fs.Func("additional-dnsname", "another DNS name for the certificate (repeatable)", func(s string) error {
		dnsNames = append(dnsNames, s)
		return nil
	})
	var ips []net.IP
	fs.Func("additional-ipaddress", "another IP address for the certificate (repeatable)", func(s string) error {
		ip := net.ParseIP(s)
		if ip == nil {
			return fmt.Errorf("%q is not an IP address", s)
		}
		ips = append(ips, ip)
		return nil
	})
	if _, ok := x.parse(args, noArgument); !ok {
		return 1
	}
	var role tlsutil.Role
	n := 0
	for _, r := range []struct {
		set  bool
		role tlsutil.Role
	}{{*server, tlsutil.RoleServer}, {*client, tlsutil.RoleClient}, {*cli, tlsutil.RoleCLI}} {
		if r.set {
			role = r.role
			n++
		}
	}
	if n != 1 {
		return fail(stderr, "exactly one of -server, -client or -cli is required")
	}
	ca, err := tlsutil.LoadCA(*caFile, *caKey)
	if err != nil {
		return fail(stderr, "%v", err)
	}
	certPEM, keyPEM, err := tlsutil.GenerateCert(ca, tlsutil.CertRequest{
		Role: role, Region: *region, Days: *days, DNSNames: dnsNames, IPAddresses: ips,
	})
	if err != nil {
		return fail(stderr, "%v", err)
	}
	certPath, keyPath, err := writeNumbered(*dir, *region+"-"+string(role)+"-claimd", certPEM, keyPEM)
	if err != nil {
		return fail(stderr, "%v", err)
	}
	fmt.Fprintf(stdout, "==> wrote %s\n==> wrote %s\n", certPath, keyPath)
	return 0
}

// writeNumbered writes base.pem and base-key.pem in dir, or base-1.pem and
// base-1-key.pem if those exist, and so on: one command per server gives
// each its own pair without the operator naming them.
func writeNumbered(dir, base string, certPEM, keyPEM []byte) (certPath, keyPath string, err error) {
	for i := 0; i < 1000; i++ {
		name := base
		if i > 0 {
			name += "-" + strconv.Itoa(i)
		}
		certPath = filepath.Join(dir, name+".pem")
		keyPath = filepath.Join(dir, name+"-key.pem")
		if exists(certPath) || exists(keyPath) {
			continue
		}
		err = writeNew(certPath, certPEM, keyPath, keyPEM)
		if errors.Is(err, os.ErrExist) {
			continue // another run took this number between the check and the write
		}
		return certPath, keyPath, err
	}
	return "", "", fmt.Errorf("%s: too many numbered files already in %s", base, dir)
}

// writeNew writes a certificate (0644) and its key (0600), refusing to
// replace either file. If the key cannot be written the certificate is
// removed, so a failed run leaves no half pair behind.
func writeNew(certPath string, certPEM []byte, keyPath string, keyPEM []byte) error {
	if err := writeExclusive(certPath, certPEM, 0o644); err != nil {
		return err
	}
	if err := writeExclusive(keyPath, keyPEM, 0o600); err != nil {
		os.Remove(certPath)
		return err
	}
	return nil
}

// writeExclusive creates path (O_EXCL) with exactly mode. The umask can
// only narrow a key's 0600, but a strict one (077) would leave a certificate
// unreadable to an agent running as another user, hence the Chmod.
func writeExclusive(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
