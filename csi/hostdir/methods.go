package hostdir

import (
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// knownMethod reports whether name is an RPC of the Identity, Controller or
// Node service, so that a typo in a -fail flag is an error instead of a
// fault that silently never fires.
func knownMethod(name string) bool {
	for _, desc := range [][]string{
		methodNames(csipb.Identity_ServiceDesc.Methods),
		methodNames(csipb.Controller_ServiceDesc.Methods),
		methodNames(csipb.Node_ServiceDesc.Methods),
	} {
		for _, m := range desc {
			if m == name {
				return true
			}
		}
	}
	return false
}

func methodNames(ms []grpc.MethodDesc) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.MethodName
	}
	return out
}

// methodOf is the bare RPC name of a full gRPC method ("/csi.v1.Node/X").
func methodOf(fullMethod string) string {
	return fullMethod[strings.LastIndex(fullMethod, "/")+1:]
}
