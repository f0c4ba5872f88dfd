package etcdcell

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Member is one embedded etcd server in this process, its peers in other
// processes, called through its in-process v3client as an application
// embedding etcd calls it. It implements cell.Member.
type Member struct {
	e        *embed.Etcd
	cl       *clientv3.Client
	logLevel zap.AtomicLevel
	// closeOnce makes the first of Close and CloseGracefully the only one.
	closeOnce sync.Once
}

var _ cell.Member = (*Member)(nil)

// OpenMember starts member spec.Index of a cluster whose members' peer
// and client URLs are at spec.PeerAddrs and spec.ClientAddrs. The
// members of a new cluster wait for each other: it returns once they
// have (or ctx ends), so the processes must start together.
func OpenMember(ctx context.Context, spec cell.MemberSpec) (cell.Member, error) {
	i := spec.Index
	if i < 0 || i >= len(spec.PeerAddrs) || len(spec.ClientAddrs) != len(spec.PeerAddrs) {
		return nil, fmt.Errorf("etcd member %d of %d peers, %d client addresses", i, len(spec.PeerAddrs), len(spec.ClientAddrs))
	}
	var initial []string
	for j, a := range spec.PeerAddrs {
		initial = append(initial, fmt.Sprintf("%s=http://%s", memberName(j), a))
	}
	m := &Member{logLevel: zap.NewAtomicLevelAt(zap.ErrorLevel)}
	lg := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.Lock(os.Stderr), m.logLevel))
	cfg := embed.NewConfig()
	cfg.Name = memberName(i)
	cfg.Dir = spec.Dir
	peer := url.URL{Scheme: "http", Host: spec.PeerAddrs[i]}
	client := url.URL{Scheme: "http", Host: spec.ClientAddrs[i]}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = strings.Join(initial, ",")
	cfg.InitialClusterToken = "coord-bench"
	if spec.Join {
		// Added as a learner first (Member.AddLearner on a member).
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	if spec.Scale.QuotaBytes > 0 {
		cfg.QuotaBackendBytes = spec.Scale.QuotaBytes
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg.With(zap.String("member", cfg.Name)))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd member %d: %w", i, err)
	}
	m.e = e
	if spec.Join {
		// A learner is ready once it has caught up and published itself
		// through the leader; the scale scenario times its catch-up by
		// its applied index instead, from its start.
		m.cl = v3client.New(e.Server)
		return m, nil
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		m.Close()
		return nil, fmt.Errorf("etcd member %d: %w", i, err)
	case <-ctx.Done():
		m.Close()
		return nil, fmt.Errorf("etcd member %d not ready: %w", i, ctx.Err())
	}
	m.cl = v3client.New(e.Server)
	return m, nil
}

// Side returns "etcd".
func (m *Member) Side() string { return "etcd" }

// Put writes through the member.
func (m *Member) Put(ctx context.Context, key string, value []byte) error {
	_, err := m.cl.Put(ctx, key, string(value))
	return err
}

// Get reads through the member.
func (m *Member) Get(ctx context.Context, key string, serializable bool) error {
	var opts []clientv3.OpOption
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	_, err := m.cl.Get(ctx, key, opts...)
	return err
}

// NewSession grants a lease of ttl (rounded up to whole seconds) and
// keeps it alive.
func (m *Member) NewSession(ctx context.Context, ttl time.Duration) (cell.Session, error) {
	return newSession(ctx, m.cl, ttl)
}

// Watch watches prefix on the member and returns once etcd confirmed it.
func (m *Member) Watch(ctx context.Context, prefix string, fn func(key string)) error {
	return watch(ctx, m.cl, prefix, fn)
}

// Close stops the member: hard, as Cell.Close does, since the other
// processes stop theirs at the same time and a graceful stop would wait
// for a leadership transfer that cannot happen. A closing member logs
// its listeners' ends as errors: nothing is logged from here on.
func (m *Member) Close() error {
	m.closeOnce.Do(func() {
		m.logLevel.SetLevel(zap.FatalLevel)
		if m.cl != nil {
			m.cl.Close()
		}
		m.e.Server.HardStop()
		m.e.Close()
	})
	return nil
}

// CloseGracefully is Etcd.Close, which transfers leadership first when
// the member leads (as Cell.Stop's Graceful does).
func (m *Member) CloseGracefully() error {
	m.closeOnce.Do(func() {
		m.logLevel.SetLevel(zap.FatalLevel)
		if m.cl != nil {
			m.cl.Close()
		}
		m.e.Close()
	})
	return nil
}
