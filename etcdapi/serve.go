package etcdapi

import (
	"context"
	"crypto/tls"
	"errors"
	"hash/fnv"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Defaults of the options. They fit honest use by etcd clients: etcd's
// own request limit is 1.5 MiB, clientv3 keeps one connection per
// endpoint and multiplexes its streams over it, and shares one watch
// stream among the watches made with one context.
const (
	// DefaultMaxRecvMsgSize bounds one request (etcd's --max-request-bytes
	// of 1.5 MiB plus gRPC's framing).
	DefaultMaxRecvMsgSize = 2 << 20
	// DefaultMaxStreams bounds the concurrent streams (calls) of one
	// connection.
	DefaultMaxStreams = 256
	// DefaultMaxConns bounds the connections served at once.
	DefaultMaxConns = 1024
	// DefaultMaxWatchesPerStream bounds the watches of one Watch stream.
	DefaultMaxWatchesPerStream = 1024
	// DefaultMaxWatches bounds the watches of all streams together.
	DefaultMaxWatches = 65536
	// DefaultRequestTimeout bounds a unary call whose client set no
	// deadline (etcd's own request timeout is a few seconds; this
	// leaves room for a change of leader).
	DefaultRequestTimeout = 30 * time.Second
	// DefaultMaxLeases bounds the leases this front holds (each a coord
	// session kept alive by its member).
	DefaultMaxLeases = 10000
	// DefaultProgressInterval is how often a watch made with
	// progress_notify hears of a quiet range (etcd's default, 10 minutes).
	DefaultProgressInterval = 10 * time.Minute
)

// Option configures Serve.
type Option func(*options)

type options struct {
	tls              *tls.Config
	logger           *slog.Logger
	maxRecv          int
	maxStreams       uint32
	maxConns         int
	maxWatches       int
	maxLeases        int
	maxAllWatches    int64
	requestTimeout   time.Duration
	progressInterval time.Duration
	clusterID        uint64
	dbSize           func() int64
}

// WithTLS serves over TLS with cfg; set cfg.ClientAuth to
// tls.RequireAndVerifyClientCert to admit only clients with a
// certificate of a CA you trust. Without TLS anyone who reaches the
// listener is any identity: every key, lease and member of the cell is
// theirs to read, write and revoke.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithLogger logs through l (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMaxRecvMsgSize bounds one request's bytes (default
// DefaultMaxRecvMsgSize); a larger one is refused before it is read.
func WithMaxRecvMsgSize(n int) Option { return func(o *options) { o.maxRecv = n } }

// WithMaxStreams bounds the concurrent calls of one connection (default
// DefaultMaxStreams).
func WithMaxStreams(n uint32) Option { return func(o *options) { o.maxStreams = n } }

// WithMaxConns bounds the connections served at once (default
// DefaultMaxConns); further ones wait in the listener's backlog.
func WithMaxConns(n int) Option { return func(o *options) { o.maxConns = n } }

// WithMaxWatchesPerStream bounds the watches of one Watch stream
// (default DefaultMaxWatchesPerStream); a create past it is answered
// canceled.
func WithMaxWatchesPerStream(n int) Option { return func(o *options) { o.maxWatches = n } }

// WithMaxWatches bounds the watches of all streams together (default
// DefaultMaxWatches); a create past it is answered canceled.
func WithMaxWatches(n int64) Option { return func(o *options) { o.maxAllWatches = n } }

// WithRequestTimeout bounds every unary call whose client gave no
// earlier deadline (default DefaultRequestTimeout), so a call waiting for
// a quorum that does not come frees its slot.
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithMaxLeases bounds the leases this front holds at once (default
// DefaultMaxLeases); a Grant past it gets etcd's "too many requests".
func WithMaxLeases(n int) Option { return func(o *options) { o.maxLeases = n } }

// WithProgressInterval sets how often a watch made with progress_notify
// reports a quiet range (default DefaultProgressInterval).
func WithProgressInterval(d time.Duration) Option {
	return func(o *options) { o.progressInterval = d }
}

// WithClusterID sets the cluster_id of every response header (default: a
// hash of the member names the cell had when Serve started, the same on
// every member of a cell started with the same names).
func WithClusterID(id uint64) Option { return func(o *options) { o.clusterID = id } }

// WithDBSize gives Status its db_size (and db_size_in_use): f returns
// the store's size in bytes, as the host measures it (its data
// directory on disk, say). Without it Status says 1 byte: coord does not
// expose its store's size, and tools divide by it (etcdctl's endpoint
// status table).
func WithDBSize(f func() int64) Option { return func(o *options) { o.dbSize = f } }

// server is one Serve's state, shared by every connection: the leases
// it holds above all, so that a lease granted over one connection is
// kept alive by KeepAlive calls on any other.
type server struct {
	cell   coord.Cell
	node   *coord.Node // nil when serving through a *coord.Client
	o      options
	log    *slog.Logger
	leases *leases
	alarm  alarmState
	// watches counts the watches of all streams.
	watches atomic.Int64
}

// Serve serves the etcd v3 API (KV, Watch, Lease, Cluster, Maintenance,
// Auth) for cell on l until ctx ends or l fails, then stops every call
// and returns. cell is a *coord.Node (a member: everything is served)
// or a *coord.Client (the Cluster and Maintenance services that need a
// member answer Unimplemented). The ctx ending is a clean stop: Serve
// returns nil. What the front serves and how it differs from etcd is in
// docs/etcd.md.
func Serve(ctx context.Context, cell coord.Cell, l net.Listener, opts ...Option) error {
	if cell == nil || l == nil {
		return errors.New("etcdapi: Serve needs a cell and a listener")
	}
	o := options{logger: slog.Default(), maxRecv: DefaultMaxRecvMsgSize, maxStreams: DefaultMaxStreams,
		maxConns: DefaultMaxConns, maxWatches: DefaultMaxWatchesPerStream, maxLeases: DefaultMaxLeases,
		progressInterval: DefaultProgressInterval, maxAllWatches: DefaultMaxWatches,
		requestTimeout: DefaultRequestTimeout}
	for _, f := range opts {
		f(&o)
	}
	s := &server{cell: cell, o: o, log: o.logger}
	s.node, _ = cell.(*coord.Node)
	if s.o.clusterID == 0 && s.node != nil {
		s.o.clusterID = clusterIDOf(s.node.Status().Members)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.leases = newLeases(s)
	if testServeHook != nil {
		testServeHook(s)
	}

	gopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(o.maxRecv),
		grpc.MaxConcurrentStreams(o.maxStreams),
		// A connection that says nothing and holds no call is closed;
		// clients' pings are allowed as often as clientv3 sends them.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute,
			Time: 2 * time.Hour, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// A handshake that does not finish in time frees its slot.
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.ChainUnaryInterceptor(refuseAuth, s.bounded),
	}
	if o.tls != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(o.tls)))
	}
	g := grpc.NewServer(gopts...)
	pb.RegisterKVServer(g, &kvServer{s: s})
	pb.RegisterWatchServer(g, &watchServer{s: s})
	pb.RegisterLeaseServer(g, &leaseServer{s: s})
	pb.RegisterClusterServer(g, &clusterServer{s: s})
	pb.RegisterMaintenanceServer(g, &maintenanceServer{s: s})
	pb.RegisterAuthServer(g, &authServer{})
	v3lockpb.RegisterLockServer(g, &lockServer{s: s})
	v3electionpb.RegisterElectionServer(g, &electionServer{s: s})

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.leases.run(ctx)
	}()
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		g.Stop()
	}()
	err := g.Serve(limitListener(l, o.maxConns))
	close(stopped)
	cancel()
	wg.Wait()
	s.leases.stop()
	if ctx.Err() != nil || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// refuseAuth answers every Auth call but AuthStatus and Authenticate
// with errAuth: see authServer.
func refuseAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, "/etcdserverpb.Auth/") &&
		info.FullMethod != "/etcdserverpb.Auth/AuthStatus" && info.FullMethod != "/etcdserverpb.Auth/Authenticate" {
		return nil, errAuth
	}
	return h(ctx, req)
}

// testServeHook, when set by a test, is told of every server Serve
// starts.
var testServeHook func(*server)

// bounded gives a unary call the request timeout.
func (s *server) bounded(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	// A Lock waits as long as the lock is held by another: only its
	// client's deadline bounds it.
	if s.o.requestTimeout > 0 && info.FullMethod != "/v3lockpb.Lock/Lock" &&
		info.FullMethod != "/v3electionpb.Election/Campaign" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.o.requestTimeout)
		defer cancel()
	}
	return h(ctx, req)
}

// clusterIDOf hashes the member names, sorted, into a cluster ID.
func clusterIDOf(names []string) uint64 {
	names = slices.Sorted(slices.Values(names))
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// header is the response header for a state at coord revision rev (-1:
// the member's current one).
func (s *server) header(rev int64) *pb.ResponseHeader {
	h := &pb.ResponseHeader{ClusterId: s.o.clusterID}
	if s.node != nil {
		st := s.node.Status()
		h.MemberId, h.RaftTerm = st.ID, st.Term
		if rev < 0 {
			rev = st.Revision
		}
	}
	h.Revision = etcdRev(max(rev, 0))
	return h
}

// Revisions: etcd's store starts at revision 1 and its first write is 2,
// and clients rely on it (concurrency's waitDeletes reads below
// "rev-1", where 0 would mean no bound); a coord cell starts at 0 and
// its first write is 1. The front numbers every revision it shows as
// etcd would, coord's plus one, and takes etcd's back the same way.

// etcdRev is the etcd number of coord revision r (a cell's revision:
// its state at 0 is etcd's 1).
func etcdRev(r int64) int64 { return r + 1 }

// etcdKeyRev is the etcd number of a key's create or mod revision: 0
// (absent) stays 0.
func etcdKeyRev(r int64) int64 {
	if r == 0 {
		return 0
	}
	return r + 1
}

// currentRev is the revision this front's member has applied (for a
// client, the cell's now, by a read).
func (s *server) currentRev(ctx context.Context) (int64, error) {
	if s.node != nil {
		return s.node.Status().Revision, nil
	}
	_, rev, err := s.cell.List(ctx, "\xff\xff\xff\xff", coord.Serializable(), coord.Limit(1))
	return rev, err
}

// limitListener admits at most n connections at once: past that,
// Accept waits for one to close (the rest wait in the kernel's backlog).
func limitListener(l net.Listener, n int) net.Listener {
	if n <= 0 {
		return l
	}
	return &limited{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limited struct {
	net.Listener
	sem  chan struct{}
	once sync.Once
	done chan struct{}
}

func (l *limited) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limited) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
