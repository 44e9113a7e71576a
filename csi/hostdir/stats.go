package hostdir

import (
	"context"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetVolumeStats reports a volume's usage at the path where this node
// presents it. Bytes are counted against the recorded quota when there is
// one (the quota is what the volume was promised), else against Root's
// filesystem; inodes always come from the filesystem. Counting walks the
// volume, which is cheap for the small directories hostdir serves.
func (s *nodeServer) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := required("volume_id", id, "volume_path", path); err != nil {
		return nil, err
	}
	volDir, err := s.volumeDirOf(id)
	if err != nil {
		return nil, err
	}
	if !showsVolume(path, volDir) {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged or published at %s", id, path)
	}
	used, err := dirSize(volDir)
	if err != nil {
		return nil, internal("measure volume", err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(volDir, &fs); err != nil {
		return nil, internal("statfs", err)
	}
	bytes := &csipb.VolumeUsage{
		Unit:      csipb.VolumeUsage_BYTES,
		Total:     int64(fs.Blocks) * int64(fs.Bsize),
		Available: int64(fs.Bavail) * int64(fs.Bsize),
		Used:      used,
	}
	meta, err := s.p.store.readMeta(id)
	if err != nil {
		return nil, internal("read volume metadata", err)
	}
	if meta != nil && meta.CapacityBytes > 0 {
		bytes.Total = meta.CapacityBytes
		bytes.Available = max(meta.CapacityBytes-used, 0)
	}
	inodes := &csipb.VolumeUsage{
		Unit:      csipb.VolumeUsage_INODES,
		Total:     int64(fs.Files),
		Available: int64(fs.Ffree),
		Used:      int64(fs.Files - fs.Ffree),
	}
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{bytes, inodes}}, nil
}
