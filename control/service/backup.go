package service

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// backupChunk is the most snapshot bytes in one BackupStoreResponse.
const backupChunk = 1 << 20

// BackupStore streams etcd's snapshot of the store to a fleet admin: the
// first message names the revision and time, the last carries the SHA-256
// and size of every byte sent. A backup holds every domain's content,
// readers-restricted ones too, so only fleet admins may take one. The call
// is recorded in the audit log (the stream's end, with the size and
// checksum sent), refused or not.
func (s *Service) BackupStore(_ *lehrpb.BackupStoreRequest, stream grpc.ServerStreamingServer[lehrpb.BackupStoreResponse]) (err error) {
	ctx := stream.Context()
	defer s.track(ctx, "BackupStore", time.Now(), &err)
	c := s.attribute(ctx, "")
	rec := &lehrpb.AuditRecord{Method: "BackupStore", Author: c.author, TransportIdentity: c.transport}
	defer func() {
		if err != nil {
			e := apierror.FromError(err)
			rec.Code, rec.Error = codeName(e.Code.String()), e.Message
		}
		s.Audit(rec)
	}()
	if fc := s.fleetCallerOf(ctx); !fc.admin {
		return apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, "",
			"%s may not back up control's store: a backup holds every domain's content, so only fleet admins (%s) may take one; "+
				"the user control runs as, or root, may on control's unix socket ('lehr --control unix:///run/lehr-control/control.sock control backup FILE')",
			fc.who, FleetAdminsFlag)
	}
	snap, err := s.st.Backup(ctx, c.author)
	if err != nil {
		return s.apiError(ctx, err)
	}
	defer snap.Data.Close()
	h := sha256.New()
	var size int64
	first := &lehrpb.BackupStoreResponse{Revision: snap.Revision, BackupTime: timestamppb.New(snap.Time)}
	buf := make([]byte, backupChunk)
	for {
		n, rerr := io.ReadFull(snap.Data, buf)
		if n > 0 {
			h.Write(buf[:n])
			size += int64(n)
			msg := &lehrpb.BackupStoreResponse{Chunk: buf[:n]}
			if first != nil {
				first.Chunk, msg, first = buf[:n], first, nil
			}
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return apierror.New(codes.Unavailable, apierror.ReasonUnavailable, "", "back up control's store: etcd's snapshot stream: %v", rerr)
		}
	}
	if first != nil { // an empty snapshot: etcd never sends one
		return apierror.New(codes.Internal, apierror.ReasonInternal, "", "back up control's store: etcd's snapshot is empty")
	}
	sum := hex.EncodeToString(h.Sum(nil))
	rec.Detail = fmt.Sprintf("snapshot at etcd revision %d, %d bytes, sha256 %s", snap.Revision, size, sum)
	s.log.Info("control: backed up the store", "author", c.author, "revision", snap.Revision, "bytes", size, "sha256", sum)
	return stream.Send(&lehrpb.BackupStoreResponse{Sha256: sum, SizeBytes: size})
}
