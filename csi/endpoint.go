package csi

import (
	"fmt"
	"strings"
)

// SocketPath returns the filesystem path of a plugin endpoint given as
// "unix:///abs/path", "unix:relative/path" or a plain path. Other schemes are
// refused: claimd talks to plugins on the same node only, and a unix socket's
// file permissions are its access control.
func SocketPath(endpoint string) (string, error) {
	switch {
	case endpoint == "":
		return "", fmt.Errorf("csi endpoint: must not be empty")
	case strings.HasPrefix(endpoint, "unix://"):
		endpoint = strings.TrimPrefix(endpoint, "unix://")
	case strings.HasPrefix(endpoint, "unix:"):
		endpoint = strings.TrimPrefix(endpoint, "unix:")
	case strings.Contains(endpoint, "://"):
		return "", fmt.Errorf("csi endpoint %q: only unix sockets are supported", endpoint)
	}
	if endpoint == "" {
		return "", fmt.Errorf("csi endpoint: socket path must not be empty")
	}
	return endpoint, nil
}
