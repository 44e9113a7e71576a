package hostdir

import (
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// supportedModes are the access modes hostdir serves, the two CSI 1.5
// single-node modes included (it advertises SINGLE_NODE_MULTI_WRITER).
var supportedModes = map[csipb.VolumeCapability_AccessMode_Mode]bool{
	csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: true,
	csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  true,
	csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        true,
	csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   true,
	csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:    true,
	csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:  true,
	csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:   true,
}

// checkCapability returns why hostdir cannot serve vc, or "" when it can.
// A directory can only be a filesystem volume; fs_type and mount flags are
// accepted and ignored, since there is no filesystem to make.
func checkCapability(vc *csipb.VolumeCapability) string {
	if vc == nil {
		return "volume capability missing"
	}
	if !supportedModes[vc.GetAccessMode().GetMode()] {
		return "access mode " + vc.GetAccessMode().GetMode().String() + " is not supported"
	}
	if vc.GetMount() == nil {
		return "only mount access is supported: a hostdir volume is a directory, not a block device"
	}
	return ""
}

// requireCapability is checkCapability as an InvalidArgument error.
func requireCapability(vc *csipb.VolumeCapability) error {
	if why := checkCapability(vc); why != "" {
		return status.Error(codes.InvalidArgument, why)
	}
	return nil
}

func isSingleNode(m csipb.VolumeCapability_AccessMode_Mode) bool {
	return m == csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER ||
		m == csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		m == csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER ||
		m == csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
}

func isReaderOnly(m csipb.VolumeCapability_AccessMode_Mode) bool {
	return m == csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		m == csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// required returns an InvalidArgument error naming the first empty field.
func required(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "" {
			return status.Error(codes.InvalidArgument, fields[i]+" is required")
		}
	}
	return nil
}

func internal(what string, err error) error {
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}
