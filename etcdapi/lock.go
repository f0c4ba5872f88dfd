package etcdapi

import (
	"context"
	"sync"

	"github.com/coordcell/coord"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
)

// lockServer is etcd's v3lock service over coord's Mutex: a lock taken
// through it is the same lock, same queue, keys and fencing tokens, as
// coord.NewMutex(session, name) in Go, so the two exclude each other
// (clientv3's concurrency.Mutex, which writes plain keys, does not).
type lockServer struct {
	v3lockpb.UnimplementedLockServer
	s *server

	mu sync.Mutex
	// held maps the key of each lock taken through this front to its
	// Mutex, for Unlock. A hold that ended another way (unlocked
	// through another front, its lease revoked or let go by this front,
	// the key deleted) closes its Mutex's Done: sweep drops those, so
	// the map stays as large as the holds that are live.
	held map[string]*coord.Mutex
	// sweepAt is the size at which Lock next sweeps held.
	sweepAt int
}

// minSweep is the smallest held map Lock sweeps: below it a sweep costs
// more than the few entries it could drop.
const minSweep = 64

// Lock waits for the lock name on the session of the request's lease
// and returns its queue key (which lives while the lock is held).
func (ls *lockServer) Lock(ctx context.Context, r *v3lockpb.LockRequest) (*v3lockpb.LockResponse, error) {
	if r.Lease == 0 {
		return nil, rpctypes.ErrGRPCLeaseNotFound
	}
	sess, release, err := ls.s.leases.pin(ctx, r.Lease)
	if err != nil {
		return nil, err
	}
	defer release()
	m := coord.NewMutex(sess, string(r.Name))
	if _, err := m.Lock(ctx); err != nil {
		return nil, toGRPC(err)
	}
	ls.mu.Lock()
	if ls.held == nil {
		ls.held = make(map[string]*coord.Mutex)
	}
	ls.held[m.Key()] = m
	if len(ls.held) >= ls.sweepAt {
		ls.sweep()
	}
	ls.mu.Unlock()
	return &v3lockpb.LockResponse{Header: ls.s.header(int64(m.Token())), Key: []byte(m.Key())}, nil
}

// Unlock releases the lock whose key Lock returned: through its Mutex
// when this front took it, else by deleting the key (as etcd does).
func (ls *lockServer) Unlock(ctx context.Context, r *v3lockpb.UnlockRequest) (*v3lockpb.UnlockResponse, error) {
	key := string(r.Key)
	ls.mu.Lock()
	m := ls.held[key]
	delete(ls.held, key)
	ls.mu.Unlock()
	if m != nil && m.Unlock(ctx) == nil {
		return &v3lockpb.UnlockResponse{Header: ls.s.header(-1)}, nil
	}
	// Not taken here, or its handle was let go since (the client keeps
	// the lease alive through another front): the key is the lock.
	rev, err := ls.s.cell.Delete(ctx, key)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &v3lockpb.UnlockResponse{Header: ls.s.header(rev)}, nil
}

// sweep drops the holds that ended, and sets the next sweep at twice
// what remains, so sweeping costs O(1) per Lock amortised. ls.mu is held.
func (ls *lockServer) sweep() {
	for key, m := range ls.held {
		select {
		case <-m.Done():
			delete(ls.held, key)
		default:
		}
	}
	ls.sweepAt = max(minSweep, 2*len(ls.held))
}

// heldCount reports how many holds the front keeps (tests).
func (ls *lockServer) heldCount() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return len(ls.held)
}
