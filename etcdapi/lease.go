package etcdapi

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/coordcell/coord"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// A lease is a coord session. The front that grants it holds the
// session and its member keeps it alive (batched with all its sessions,
// no log entry) for as long as etcd clients keep the lease alive through
// this front: by KeepAlive calls on any connection to it. When the
// clients fall silent for half the TTL the front stops keeping the
// session alive (Orphan), and the cell expires it one TTL after the
// member's last keep-alive: between 1.25 and 1.5 TTL after the client's
// last keep-alive (etcd: 1 TTL). A KeepAlive, Put, Revoke or TimeToLive
// for a lease this front does not hold (granted through another member,
// or orphaned here) takes the session over (coord.WithSessionID, which
// confirms it alive in the cell first); a KeepAlive keeps it then, the
// other calls let it go again at once.

// leaseEntry is one lease this front knows.
type leaseEntry struct {
	mu   sync.Mutex // held while the session is taken over or ended
	id   int64
	ttl  int64          // granted seconds
	sess *coord.Session // nil until taken over
	kept bool           // this member keeps sess alive
	// heard is the last keep-alive from a client; orphaned when the
	// front let the session go.
	heard, orphaned time.Time
	pins            int // Lock calls waiting on sess: not let go meanwhile
}

// leases is the front's lease table, shared by all its connections.
type leases struct {
	s      *server
	mu     sync.Mutex
	m      map[int64]*leaseEntry
	closed bool // Serve is ending: no more sessions held
}

func newLeases(s *server) *leases { return &leases{s: s, m: make(map[int64]*leaseEntry)} }

func ttlSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// entry returns id's entry, made if absent (within the bound).
func (l *leases) entry(id int64) (*leaseEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, rpctypes.ErrGRPCStopped
	}
	if e, ok := l.m[id]; ok {
		return e, nil
	}
	if len(l.m) >= l.s.o.maxLeases {
		return nil, rpctypes.ErrGRPCRequestTooManyRequests
	}
	e := &leaseEntry{id: id}
	l.m[id] = e
	return e, nil
}

func (l *leases) drop(e *leaseEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[e.id] == e {
		delete(l.m, e.id)
	}
}

// grant makes a session of ttl seconds (raised to the cell's minimum, as
// etcd raises a TTL below its own).
func (l *leases) grant(ctx context.Context, ttl, id int64) (*leaseEntry, error) {
	if id != 0 {
		// coord numbers sessions itself: an ID in use is refused as etcd
		// refuses it, a new one cannot be chosen.
		if _, err := l.handle(ctx, id); err == nil {
			return nil, rpctypes.ErrGRPCLeaseExist
		}
		return nil, unimplemented("a lease ID chosen by the client (Grant with ID 0)")
	}
	if ttl > math.MaxInt64/int64(time.Second) {
		return nil, rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	d := max(time.Duration(ttl)*time.Second, l.s.cell.MinSessionTTL())
	d = time.Duration(ttlSeconds(d)) * time.Second
	l.mu.Lock()
	full := len(l.m) >= l.s.o.maxLeases
	l.mu.Unlock()
	if full {
		return nil, rpctypes.ErrGRPCRequestTooManyRequests
	}
	sess, err := l.s.cell.NewSession(ctx, coord.WithTTL(d))
	if err != nil {
		if errors.Is(err, coord.ErrInvalidTTL) {
			return nil, rpctypes.ErrGRPCLeaseTTLTooLarge
		}
		return nil, toGRPC(err)
	}
	e := &leaseEntry{id: int64(sess.ID()), ttl: ttlSeconds(d), sess: sess, kept: true, heard: time.Now()}
	l.mu.Lock()
	closed := l.closed
	if !closed {
		l.m[e.id] = e
	}
	l.mu.Unlock()
	if closed {
		sess.Orphan()
		return nil, rpctypes.ErrGRPCStopped
	}
	return e, nil
}

// takeOver adopts id's session into e; e.mu is held. A session the cell
// has ended gives ErrGRPCLeaseNotFound.
func (l *leases) takeOver(ctx context.Context, e *leaseEntry) error {
	if e.id <= 0 {
		// No session has it; and WithSessionID(0) would make a new one.
		return rpctypes.ErrGRPCLeaseNotFound
	}
	sess, err := l.s.cell.NewSession(ctx, coord.WithSessionID(coord.SessionID(e.id)))
	if err != nil {
		if errors.Is(err, coord.ErrSessionExpired) || errors.Is(err, coord.ErrSessionClosed) {
			return rpctypes.ErrGRPCLeaseNotFound
		}
		return toGRPC(err)
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		sess.Orphan()
		return rpctypes.ErrGRPCStopped
	}
	e.sess, e.kept, e.ttl = sess, true, ttlSeconds(sess.TTL())
	return nil
}

// keepAlive is one client keep-alive of id: the TTL granted, 0 for a
// lease the cell no longer has.
func (l *leases) keepAlive(ctx context.Context, id int64) (int64, error) {
	e, err := l.entry(id)
	if err != nil {
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kept && e.sess.Err() == nil {
		e.heard = time.Now()
		return e.ttl, nil
	}
	if e.kept && errors.Is(e.sess.Err(), coord.ErrSessionExpired) {
		// The cell ended it while we held it.
		e.kept = false
		l.drop(e)
		return 0, nil
	}
	// Not kept here, or the handle ended for another reason (this member
	// stopping): take it over, or fail so the client tries elsewhere.
	if err := l.takeOver(ctx, e); err != nil {
		if errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) {
			l.drop(e)
			return 0, nil
		}
		return 0, err
	}
	e.heard = time.Now()
	return e.ttl, nil
}

// handle returns a session handle for id, for a put, revoke or TTL
// read: the one held, kept or not, else a takeover let go at the next
// sweep (a use is not a keep-alive).
func (l *leases) handle(ctx context.Context, id int64) (*coord.Session, error) {
	e, err := l.entry(id)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sess != nil {
		return e.sess, nil
	}
	if err := l.takeOver(ctx, e); err != nil {
		l.drop(e)
		return nil, err
	}
	e.heard = time.Now().Add(-time.Duration(e.ttl) * time.Second)
	return e.sess, nil
}

// pin returns a live handle of id's session, kept alive by this member
// until release however the client's keep-alives go: a Lock waiting on
// it must not see it let go under it.
func (l *leases) pin(ctx context.Context, id int64) (*coord.Session, func(), error) {
	e, err := l.entry(id)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.kept || e.sess.Err() != nil {
		if err := l.takeOver(ctx, e); err != nil {
			if errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) {
				l.drop(e)
			}
			return nil, nil, err
		}
		e.heard = time.Now().Add(-time.Duration(e.ttl) * time.Second)
	}
	e.pins++
	return e.sess, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.pins--
	}, nil
}

// revoke ends id's session in the cell: one change deletes its keys.
func (l *leases) revoke(ctx context.Context, id int64) error {
	sess, err := l.handle(ctx, id)
	if err != nil {
		return err
	}
	// A handle this front let go of may name a session the cell has
	// ended since, which Close would not say: ask the leader first.
	if _, err := sess.TimeToLive(ctx); err != nil {
		l.forget(id)
		return toGRPC(err)
	}
	if err := sess.Close(ctx); err != nil {
		return toGRPC(err)
	}
	l.forget(id)
	return nil
}

// forget drops id's entry.
func (l *leases) forget(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, id)
}

// run sweeps the table until ctx ends: lets go of leases the clients
// stopped keeping alive, forgets those long gone.
func (l *leases) run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			l.sweep(now)
		}
	}
}

func (l *leases) sweep(now time.Time) {
	l.mu.Lock()
	es := make([]*leaseEntry, 0, len(l.m))
	for _, e := range l.m {
		es = append(es, e)
	}
	l.mu.Unlock()
	for _, e := range es {
		if !e.mu.TryLock() {
			continue
		}
		ttl := time.Duration(e.ttl) * time.Second
		switch {
		case e.kept && e.sess.Err() != nil:
			// Ended in the cell (expired or revoked elsewhere), or this
			// member stopped: a later use takes it over again, or fails.
			e.kept = false
			l.drop(e)
		case e.kept && e.pins == 0 && now.Sub(e.heard) > ttl/2:
			e.sess.Orphan()
			e.kept, e.orphaned = false, now
		case !e.kept && e.sess != nil && now.Sub(e.orphaned) > 2*ttl+time.Minute:
			// Long expired in the cell, unless another front keeps it:
			// a later use takes it over again.
			l.drop(e)
		}
		e.mu.Unlock()
	}
}

// stop lets go of every lease still kept: the cell expires them unless
// clients keep them alive through another member.
func (l *leases) stop() {
	l.mu.Lock()
	l.closed = true
	es := l.m
	l.m = make(map[int64]*leaseEntry)
	l.mu.Unlock()
	// Entries are locked before the table elsewhere: not under l.mu.
	for _, e := range es {
		e.mu.Lock()
		if e.kept {
			e.sess.Orphan()
			e.kept = false
		}
		e.mu.Unlock()
	}
}

// leaseServer is etcd's Lease service over the table.
type leaseServer struct {
	pb.UnimplementedLeaseServer
	s *server
}

// LeaseGrant makes a lease (a coord session) with the TTL asked for.
func (ls *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	e, err := ls.s.leases.grant(ctx, r.TTL, r.ID)
	if err != nil {
		return nil, err
	}
	return &pb.LeaseGrantResponse{Header: ls.s.header(-1), ID: e.id, TTL: e.ttl}, nil
}

// LeaseRevoke ends the lease's session, deleting its keys.
func (ls *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	if err := ls.s.leases.revoke(ctx, r.ID); err != nil {
		return nil, err
	}
	return &pb.LeaseRevokeResponse{Header: ls.s.header(-1)}, nil
}

// LeaseKeepAlive answers each keep-alive with the lease's TTL, 0 for a
// lease that is gone.
func (ls *leaseServer) LeaseKeepAlive(stream grpc.BidiStreamingServer[pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse]) error {
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		ttl, err := ls.s.leases.keepAlive(ctx, req.ID)
		if err != nil {
			return err
		}
		if err := stream.Send(&pb.LeaseKeepAliveResponse{Header: ls.s.header(-1), ID: req.ID, TTL: ttl}); err != nil {
			return nil
		}
	}
}

// LeaseTimeToLive says what the cell would still wait before expiring
// the lease (-1: gone), and with keys the keys it holds (a walk of the
// keyspace, bounded by the cell's read bound per page).
func (ls *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	gone := &pb.LeaseTimeToLiveResponse{Header: ls.s.header(-1), ID: r.ID, TTL: -1}
	sess, err := ls.s.leases.handle(ctx, r.ID)
	if errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) {
		return gone, nil
	}
	if err != nil {
		return nil, err
	}
	left, err := sess.TimeToLive(ctx)
	if errors.Is(err, coord.ErrSessionExpired) {
		return gone, nil
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: ls.s.header(-1), ID: r.ID, TTL: int64(left / time.Second),
		GrantedTTL: ttlSeconds(sess.TTL())}
	if r.Keys {
		keys, err := keysOf(ctx, ls.s.cell, sess.ID())
		if err != nil {
			return nil, toGRPC(err)
		}
		resp.Keys = keys
	}
	return resp, nil
}

// keysOf walks the keyspace for the keys of session id.
func keysOf(ctx context.Context, c coord.Cell, id coord.SessionID) ([][]byte, error) {
	var keys [][]byte
	const page = 512
	for after := ""; ; {
		kvs, _, err := c.List(ctx, "", coord.Limit(page), coord.After(after))
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			if kv.Session == id {
				keys = append(keys, []byte(kv.Key))
			}
		}
		if len(kvs) < page {
			return keys, nil
		}
		after = kvs[len(kvs)-1].Key
	}
}

// LeaseLeases lists the leases this front holds or has held lately (not
// those only other members' fronts know: a coord cell has no list of
// sessions to serve it from).
func (ls *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	l := ls.s.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	resp := &pb.LeaseLeasesResponse{Header: ls.s.header(-1)}
	for id, e := range l.m {
		if e.mu.TryLock() {
			if e.sess != nil {
				resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
			}
			e.mu.Unlock()
		}
	}
	return resp, nil
}
