package etcdapi

import (
	"context"
	"errors"

	"github.com/coordcell/coord"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// toGRPC answers a coord error as etcd's server would answer the same
// condition (its rpctypes errors, matched by clients on code and
// message), so client libraries' handling (retry on no leader, restart a
// watch on compaction) works unchanged. What etcd has no word for keeps
// coord's message under the nearest code.
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var ce *coord.CompactedError
	switch {
	case errors.As(err, &ce), errors.Is(err, coord.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, coord.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	case errors.Is(err, coord.ErrNoQuorum), errors.Is(err, coord.ErrNotReady):
		return rpctypes.ErrGRPCNoLeader
	case errors.Is(err, coord.ErrAmbiguous):
		// etcd's word for a proposal whose outcome it cannot tell.
		return rpctypes.ErrGRPCTimeout
	case errors.Is(err, coord.ErrClosed), errors.Is(err, coord.ErrRemoved):
		return rpctypes.ErrGRPCStopped
	case errors.Is(err, coord.ErrKeyTooLarge), errors.Is(err, coord.ErrValueTooLarge):
		return rpctypes.ErrGRPCRequestTooLarge
	case errors.Is(err, coord.ErrTooManyOps):
		return rpctypes.ErrGRPCTooManyOps
	case errors.Is(err, coord.ErrQuotaExceeded):
		return rpctypes.ErrGRPCNoSpace
	case errors.Is(err, coord.ErrSessionExpired), errors.Is(err, coord.ErrSessionClosed):
		return rpctypes.ErrGRPCLeaseNotFound
	case errors.Is(err, coord.ErrInvalidKey):
		return rpctypes.ErrGRPCEmptyKey
	case errors.Is(err, coord.ErrForbidden):
		return rpctypes.ErrGRPCPermissionDenied
	case errors.Is(err, coord.ErrOverloaded), errors.Is(err, coord.ErrTooManySessions):
		return rpctypes.ErrGRPCRequestTooManyRequests
	case errors.Is(err, coord.ErrReadTooLarge):
		return status.Error(codes.ResourceExhausted, "etcdapi: "+err.Error())
	case errors.Is(err, coord.ErrInvalidArgument), errors.Is(err, coord.ErrInvalidTTL):
		return status.Error(codes.InvalidArgument, "etcdapi: "+err.Error())
	case errors.Is(err, coord.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return rpctypes.ErrGRPCCanceled
	}
	return status.Error(codes.Unknown, "etcdapi: "+err.Error())
}

// unimplemented is the answer to what this front does not do (yet),
// saying what and why, so an operator reading a client's error knows it
// is the front and not the cell.
func unimplemented(what string) error {
	return status.Error(codes.Unimplemented, "etcdapi: "+what+" is not supported by coord's etcd front (see docs/etcd.md)")
}
