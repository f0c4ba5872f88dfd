// Package etcdcell runs a three-member embedded etcd cluster in this
// process (go.etcd.io/etcd/server/v3/embed): peers and clients on
// loopback, data on disk with fsync (no unsafe options), and etcd's
// default timings (100ms heartbeat, 1s election).
package etcdcell

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
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

// ClientMode is how the bench talks to each etcd member.
type ClientMode string

// The client modes.
const (
	// InProcess uses v3client: clientv3 calling the member's gRPC
	// service implementations directly, with no socket and no gRPC
	// encoding. It is how an application embedding etcd talks to it, and
	// the closest match to coord's in-process API.
	InProcess ClientMode = "inproc"
	// GRPC dials the member's client URL on loopback.
	GRPC ClientMode = "grpc"
)

// ParseClientMode parses a -etcd-client flag value.
func ParseClientMode(s string) (ClientMode, error) {
	switch m := ClientMode(s); m {
	case InProcess, GRPC:
		return m, nil
	}
	return "", fmt.Errorf("etcd client mode %q: want %q or %q", s, InProcess, GRPC)
}

// Cell is a running embedded etcd cluster. It implements cell.Cell.
type Cell struct {
	members [cell.Members]*embed.Etcd
	clients [cell.Members]*clientv3.Client
	curls   [cell.Members]string

	// logLevel is the members' log level: errors while the cell runs,
	// nothing once it closes (a closing member logs its listeners' ends
	// as errors).
	logLevel zap.AtomicLevel

	mu      sync.Mutex
	stopped [cell.Members]bool
	closedM [cell.Members]bool // Etcd.Close was called (it must be once)
	bg      sync.WaitGroup     // closes of crashed members
	closed  bool
}

var _ cell.Cell = (*Cell)(nil)

// Opener returns a cell.Opener that starts etcd with the client mode.
func Opener(mode ClientMode) cell.Opener {
	return func(ctx context.Context, opts cell.Options) (cell.Cell, error) {
		return Open(ctx, opts, mode)
	}
}

// Open starts the three members, each with its own data directory under
// opts.Dir, and returns once the cluster has committed a first write.
func Open(ctx context.Context, opts cell.Options, mode ClientMode) (cell.Cell, error) {
	addrs, err := cell.FreeAddrs(2 * cell.Members)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range cell.Members {
		initial = append(initial, fmt.Sprintf("%s=http://%s", memberName(i), addrs[i]))
	}
	c := &Cell{logLevel: zap.NewAtomicLevelAt(zap.ErrorLevel)}
	lg := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.Lock(os.Stderr), c.logLevel))
	var wg sync.WaitGroup
	var errs [cell.Members]error
	for i := range cell.Members {
		cfg := embed.NewConfig()
		cfg.Name = memberName(i)
		cfg.Dir = filepath.Join(opts.Dir, memberName(i))
		peer := url.URL{Scheme: "http", Host: addrs[i]}
		client := url.URL{Scheme: "http", Host: addrs[cell.Members+i]}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "coord-bench"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg.With(zap.String("member", cfg.Name)))
		c.curls[i] = client.String()
		// The members of a new cluster wait for each other, so they
		// start together.
		wg.Go(func() {
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errs[i] = fmt.Errorf("etcd member %d: %w", i, err)
				return
			}
			c.members[i] = e
			select {
			case <-e.Server.ReadyNotify():
			case err := <-e.Err():
				errs[i] = fmt.Errorf("etcd member %d: %w", i, err)
			case <-ctx.Done():
				errs[i] = fmt.Errorf("etcd member %d not ready: %w", i, ctx.Err())
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		c.Close()
		return nil, err
	}
	for i, e := range c.members {
		if mode == GRPC {
			c.clients[i], err = clientv3.New(clientv3.Config{
				Endpoints: []string{c.curls[i]}, DialTimeout: 5 * time.Second,
			})
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("etcd client %d: %w", i, err)
			}
		} else {
			c.clients[i] = v3client.New(e.Server)
		}
	}
	if err := cell.AwaitWrite(ctx, c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func memberName(i int) string { return fmt.Sprintf("etcd-m%d", i) }

// Side returns "etcd".
func (c *Cell) Side() string { return "etcd" }

// client returns member m's client unless the member is stopped.
func (c *Cell) client(m int) (*clientv3.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped[m] || c.closed {
		return nil, cell.ErrStopped
	}
	return c.clients[m], nil
}

// Put writes through member m.
func (c *Cell) Put(ctx context.Context, m int, key string, value []byte) error {
	cl, err := c.client(m)
	if err != nil {
		return err
	}
	_, err = cl.Put(ctx, key, string(value))
	return err
}

// Get reads through member m.
func (c *Cell) Get(ctx context.Context, m int, key string, serializable bool) error {
	cl, err := c.client(m)
	if err != nil {
		return err
	}
	var opts []clientv3.OpOption
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	_, err = cl.Get(ctx, key, opts...)
	return err
}

// Leader returns the running member whose server says it leads, or -1.
func (c *Cell) Leader() int {
	for m := range cell.Members {
		if _, err := c.client(m); err != nil {
			continue
		}
		if s := c.members[m].Server; s.Leader() == s.MemberID() {
			return m
		}
	}
	return -1
}

// LogIndex returns the leader's Raft index from the maintenance Status
// API.
func (c *Cell) LogIndex(ctx context.Context) (uint64, error) {
	m := c.Leader()
	if m < 0 {
		return 0, errors.New("etcd: no leader")
	}
	cl, err := c.client(m)
	if err != nil {
		return 0, err
	}
	st, err := cl.Status(ctx, c.curls[m])
	if err != nil {
		return 0, err
	}
	return st.RaftIndex, nil
}

// Stop stops member m: Crash is EtcdServer.HardStop (no leadership
// transfer), then the rest of the member is closed in the background;
// Graceful is Etcd.Close (which transfers leadership first).
func (c *Cell) Stop(ctx context.Context, m int, mode cell.StopMode) error {
	c.mu.Lock()
	if c.stopped[m] || c.closed {
		c.mu.Unlock()
		return cell.ErrStopped
	}
	c.stopped[m] = true
	c.mu.Unlock()
	c.mu.Lock()
	c.closedM[m] = true
	c.mu.Unlock()
	if mode == cell.Crash {
		c.members[m].Server.HardStop()
		// What is left of the member (its listeners and HTTP servers)
		// goes too, as with a dead process: peers that still talk to it
		// get refused instead of waiting on a member that never answers.
		c.bg.Go(func() {
			c.clients[m].Close()
			c.members[m].Close()
		})
		return nil
	}
	c.clients[m].Close()
	c.members[m].Close()
	return nil
}

// NewSession grants a lease of ttl (rounded up to whole seconds, etcd's
// unit) through member m and keeps it alive from that member's client.
func (c *Cell) NewSession(ctx context.Context, m int, ttl time.Duration) (cell.Session, error) {
	cl, err := c.client(m)
	if err != nil {
		return nil, err
	}
	return newSession(ctx, cl, ttl)
}

// Watch watches prefix on member m, and returns once etcd has confirmed
// that the watch is created.
func (c *Cell) Watch(ctx context.Context, m int, prefix string, fn func(key string)) error {
	cl, err := c.client(m)
	if err != nil {
		return err
	}
	return watch(ctx, cl, prefix, fn)
}

// Close closes the clients and every member. It hard-stops every member
// first: a graceful stop of the leader while its peers stop too would
// wait for a leadership transfer that cannot happen (7s per close).
func (c *Cell) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	closedM := c.closedM
	c.mu.Unlock()
	c.logLevel.SetLevel(zap.FatalLevel)
	c.bg.Wait()
	for i, cl := range c.clients {
		if cl != nil && !closedM[i] {
			cl.Close()
		}
	}
	var wg sync.WaitGroup
	for i, e := range c.members {
		if e != nil && !closedM[i] {
			wg.Go(e.Server.HardStop)
		}
	}
	wg.Wait()
	for i, e := range c.members {
		if e != nil && !closedM[i] {
			wg.Go(e.Close)
		}
	}
	wg.Wait()
	return nil
}
