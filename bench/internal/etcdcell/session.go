package etcdcell

import (
	"context"
	"sync/atomic"

	"github.com/coordcell/coord/bench/internal/cell"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// session adapts a concurrency.Session to cell.Session.
type session struct {
	s     *concurrency.Session
	ended atomic.Bool // orphaned or closed by the holder
}

// NewMutex returns etcd's mutex on name (under "/locks/").
func (s *session) NewMutex(name string) cell.Mutex {
	return concurrency.NewMutex(s.s, "/locks/"+name)
}

// NewElection returns a campaigner in the election group (under
// "/elections/").
func (s *session) NewElection(group string) cell.Election {
	return concurrency.NewElection(s.s, "/elections/"+group)
}

// Expired reports whether the session's lease ended on its own: its
// keep-alive loop stopped (the lease expired or could not be renewed)
// without the holder ending it.
func (s *session) Expired() bool {
	if s.ended.Load() {
		return false
	}
	select {
	case <-s.s.Done():
		return true
	default:
		return false
	}
}

// Orphan stops the keep-alives; etcd expires the lease after its TTL.
func (s *session) Orphan() {
	s.ended.Store(true)
	s.s.Orphan()
}

// Close revokes the lease.
func (s *session) Close(ctx context.Context) error {
	s.ended.Store(true)
	_, err := s.s.Client().Revoke(ctx, s.s.Lease())
	s.s.Orphan()
	return err
}
