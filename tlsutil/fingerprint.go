package tlsutil

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
)

// PeerCertHash is the SHA-256 (hex) of the peer's leaf certificate, "" when
// it showed none: a stable name for the certificate, for limits that count
// per certificate. It is public (the certificate is sent in the clear in
// TLS 1.2, and is no credential without its key).
func PeerCertHash(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
	return hex.EncodeToString(sum[:])
}
