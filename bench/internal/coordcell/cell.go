// Package coordcell runs a three-member coord cell in this process, over
// TCP on loopback, with data on disk and coord's default timings (100ms
// tick, 1s election timeout, 100ms heartbeat: the same as etcd's).
package coordcell

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/transport"
)

// Cell is a running coord cell. It implements cell.Cell.
type Cell struct {
	nodes [cell.Members]*coord.Node
	trs   [cell.Members]*cuttable

	mu      sync.Mutex
	stopped [cell.Members]bool
	killed  [cell.Members]bool // stopped by Crash
	closed  bool
}

var _ cell.Cell = (*Cell)(nil)

// Open starts the three members, each with its own data directory under
// opts.Dir, and returns once the cell has committed a first write.
func Open(ctx context.Context, opts cell.Options) (cell.Cell, error) {
	addrs, err := cell.FreeAddrs(cell.Members)
	if err != nil {
		return nil, err
	}
	peers := make([]coord.Peer, cell.Members)
	peerAddrs := map[string]string{}
	for i, a := range addrs {
		peers[i] = coord.Peer{Name: memberName(i), Addr: a}
		peerAddrs[memberName(i)] = a
	}
	c := &Cell{}
	for i := range cell.Members {
		tcp, err := transport.ListenTCP(transport.TCPConfig{
			Name: memberName(i), Addr: addrs[i], Peers: peerAddrs,
		})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("coord member %d: %w", i, err)
		}
		c.trs[i] = &cuttable{Transport: &counted{Transport: tcp}}
		c.nodes[i], err = coord.Open(ctx, coord.Config{
			Name:      memberName(i),
			Addr:      addrs[i],
			Peers:     peers,
			DataDir:   filepath.Join(opts.Dir, memberName(i)),
			Transport: c.trs[i],
			// Clients (Connect) reach the member here: plaintext on
			// loopback, as etcd's client URLs are.
			ClientAddr: "127.0.0.1:0",
		})
		if err != nil {
			tcp.Close()
			c.trs[i] = nil
			c.Close()
			return nil, fmt.Errorf("coord member %d: %w", i, err)
		}
	}
	if err := cell.AwaitWrite(ctx, c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func memberName(i int) string { return fmt.Sprintf("coord-m%d", i) }

// Side returns "coord".
func (c *Cell) Side() string { return "coord" }

// node returns member m unless it is stopped.
func (c *Cell) node(m int) (*coord.Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped[m] || c.closed {
		return nil, cell.ErrStopped
	}
	return c.nodes[m], nil
}

// Node returns member m's node, for what serves beside it in this
// process (the etcd front of the etcd-* scenarios), or cell.ErrStopped.
func (c *Cell) Node(m int) (*coord.Node, error) { return c.node(m) }

// Put writes through member m.
func (c *Cell) Put(ctx context.Context, m int, key string, value []byte) error {
	n, err := c.node(m)
	if err != nil {
		return err
	}
	_, err = n.Put(ctx, key, value)
	return err
}

// Get reads through member m; a missing key is not an error.
func (c *Cell) Get(ctx context.Context, m int, key string, serializable bool) error {
	n, err := c.node(m)
	if err != nil {
		return err
	}
	var opts []coord.ReadOption
	if serializable {
		opts = append(opts, coord.Serializable())
	}
	_, err = n.Get(ctx, key, opts...)
	if errors.Is(err, coord.ErrNotFound) {
		err = nil
	}
	return err
}

// Leader returns the running member whose status says it leads, or -1.
func (c *Cell) Leader() int {
	for m := range cell.Members {
		if n, err := c.node(m); err == nil && n.Status().Role == coord.RoleLeader {
			return m
		}
	}
	return -1
}

// LogIndex returns the leader's last log index.
func (c *Cell) LogIndex(ctx context.Context) (uint64, error) {
	m := c.Leader()
	if m < 0 {
		return 0, errors.New("coord: no leader")
	}
	n, err := c.node(m)
	if err != nil {
		return 0, err
	}
	return n.Status().LastIndex, nil
}

// Stop stops member m. Crash cuts its transport at once and closes the
// node in the background (its Close can no longer reach anyone); Graceful
// calls Close and waits for it.
func (c *Cell) Stop(ctx context.Context, m int, mode cell.StopMode) error {
	c.mu.Lock()
	if c.stopped[m] || c.closed {
		c.mu.Unlock()
		return cell.ErrStopped
	}
	c.stopped[m] = true
	c.killed[m] = mode == cell.Crash
	c.mu.Unlock()
	switch mode {
	case cell.Crash:
		c.trs[m].kill()
		return nil
	default:
		return c.nodes[m].Close()
	}
}

// NewSession creates a session on member m.
func (c *Cell) NewSession(ctx context.Context, m int, ttl time.Duration) (cell.Session, error) {
	n, err := c.node(m)
	if err != nil {
		return nil, err
	}
	s, err := n.NewSession(ctx, coord.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	return &session{s: s}, nil
}

// Watch watches prefix on member m. coord's watch is established when
// Node.Watch returns (it starts from the member's current revision).
func (c *Cell) Watch(ctx context.Context, m int, prefix string, fn func(key string)) error {
	n, err := c.node(m)
	if err != nil {
		return err
	}
	w := n.Watch(ctx, prefix)
	go func() {
		for ev := range w.Events() {
			if ev.Type != coord.EventProgress {
				fn(ev.KV.Key)
			}
		}
	}()
	return nil
}

// Close closes every member (a crashed one too) and its transport.
func (c *Cell) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for i, n := range c.nodes {
		if n == nil {
			continue
		}
		wg.Go(func() {
			err := n.Close()
			c.mu.Lock()
			killed := c.killed[i]
			c.mu.Unlock()
			if killed {
				err = nil // it stopped when its transport closed under it
			}
			if c.trs[i] != nil {
				c.trs[i].Close()
			}
			emu.Lock()
			errs = append(errs, err)
			emu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// LogFsyncs returns the log fsyncs of the running members (Status
// LogSyncs) and the leader's.
func (c *Cell) LogFsyncs() (all, leader uint64) {
	for m := range cell.Members {
		if n, err := c.node(m); err == nil {
			st := n.Status()
			all += st.LogSyncs
			if st.Role == coord.RoleLeader {
				leader = st.LogSyncs
			}
		}
	}
	return all, leader
}
