// Package coordtest starts in-memory cells for tests: n members of a cell
// in one process, wired by an in-memory network (no ports, so parallel
// tests never fight over them), with faults on demand: partitions,
// isolation, message loss and delay, crashes and restarts.
//
//	func TestFailover(t *testing.T) {
//		c := coordtest.NewCluster(t, 3)
//		leader := c.Leader()
//		if _, err := leader.Put(ctx, "k", []byte("v")); err != nil { ... }
//		c.Crash(c.LeaderIndex())
//		_, err := c.Leader().Get(ctx, "k") // a new leader, and the write is there
//	}
//
// A Cluster is safe for use by the test goroutine and the goroutines it
// starts; it is cleaned up with t.Cleanup.
//
// # Virtual time
//
// A Cluster made inside a testing/synctest bubble lives in it whole: its
// members, their storage, the network, clients and recipes. Timers,
// timeouts and sleeps then advance only when every goroutine of the test
// waits, so elections, session expiries and failovers that take seconds
// on the wall clock take milliseconds, and a test of a service's own
// leader election does not wait on them:
//
//	func TestMyServiceFailsOver(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			c := coordtest.NewCluster(t, 3)
//			// ... campaign, c.Crash(c.LeaderIndex()), observe the new leader
//		})
//	}
//
// Make the Cluster, and anything that talks to it, inside the bubble. The
// simulator (package sim in this module) runs thousands of seeded fault
// histories of whole cells this way.
package coordtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/internal/gossip"
	"github.com/coordcell/coord/internal/member"
	"github.com/coordcell/coord/internal/memlisten"
	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
	"github.com/hashicorp/memberlist"
)

// Option configures a Cluster.
type Option func(*options)

type options struct {
	seed      int64
	seedSet   bool
	configure func(i int, cfg *coord.Config)
	logger    *slog.Logger
	timeout   time.Duration
	gossip    bool
	stagger   time.Duration
	clients   bool
}

// WithClients makes every member serve clients (Admin.ServeClients) on an
// in-memory listener named after it, so tests can Connect clients that
// are not members. No ports are used.
func WithClients() Option {
	return func(o *options) { o.clients = true }
}

// WithGossip makes the members find each other by gossip over an
// in-memory network instead of static peers: none is given the others'
// Raft addresses, each gossips with the members started before it, the
// first min(n, 3) to agree found the cell (BootstrapExpect) and the
// autopilot adds, promotes and replaces the rest. Timings are fast for
// tests: stabilization 1s, dead threshold 2s, autopilot every 100ms.
// Adjust cfg.Gossip with WithConfig.
func WithGossip() Option {
	return func(o *options) { o.gossip = true }
}

// WithStaggeredStart starts gossiping members in an order and at times
// drawn from the seed, each within max of the first, instead of all at
// once: bootstrap must form one cell whatever the order.
func WithStaggeredStart(max time.Duration) Option {
	return func(o *options) { o.stagger = max }
}

// WithSeed fixes the seed of the network's faults and of crash outcomes,
// to replay a failure. By default a random seed is used and logged.
func WithSeed(seed int64) Option {
	return func(o *options) { o.seed, o.seedSet = seed, true }
}

// WithConfig lets a test adjust each member's Config (member i) before it
// opens, e.g. limits or history retention.
func WithConfig(f func(i int, cfg *coord.Config)) Option {
	return func(o *options) { o.configure = f }
}

// WithLogger sends every member's logs to l (default: discarded).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithWaitTimeout bounds how long Leader waits for a leader (default 10s).
func WithWaitTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// Cluster is an in-memory cell of n members.
type Cluster struct {
	t    testing.TB
	opts options
	net  *transport.Network
	gnet *gossip.MemNetwork
	mnet *memlisten.Network // clients' network (WithClients)
	rng  *rand.Rand

	mu      sync.Mutex
	names   []string
	nodes   []*coord.Node // nil while crashed
	disks   []*storage.MemDisk
	trs     []transport.Transport
	configs []coord.Config
	gtrs    []memberlist.Transport
	gaddrs  []string
	clients map[*coord.Client]string // names of the clients Connect made
	retired map[int]bool             // members Retire took out of the cell for good
	// clientSeq numbers clients, failed Connects too.
	clientSeq int
}

// NewCluster starts an n-member cell and registers its cleanup with t.
// Members are named "n0" … "n{n-1}". Timing is fast for tests: a 10ms tick,
// election timeout 200ms.
func NewCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	o := options{timeout: 10 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if !o.seedSet {
		o.seed = rand.Int64()
	}
	t.Logf("coordtest: seed %d (replay with coordtest.WithSeed(%d))", o.seed, o.seed)
	c := &Cluster{
		t:    t,
		opts: o,
		net:  transport.NewNetwork(o.seed),
		gnet: gossip.NewMemNetwork(),
		mnet: memlisten.New(),
		rng:  rand.New(rand.NewPCG(uint64(o.seed), 0x636f6f7264)),
	}
	peers := make([]coord.Peer, n)
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		c.names = append(c.names, name)
		peers[i] = coord.Peer{Name: name, Addr: name}
	}
	c.nodes = make([]*coord.Node, n)
	c.disks = make([]*storage.MemDisk, n)
	c.trs = make([]transport.Transport, n)
	c.configs = make([]coord.Config, n)
	c.gtrs = make([]memberlist.Transport, n)
	c.gaddrs = make([]string, n)
	for i := range n {
		cfg := coord.Config{
			Name:           c.names[i],
			Peers:          peers,
			TickInterval:   10 * time.Millisecond,
			ElectionTicks:  20,
			HeartbeatTicks: 2,
			Logger:         o.logger,
		}
		if o.gossip {
			cfg.Peers, cfg.Addr = nil, c.names[i]
			cfg.Gossip = &coord.GossipConfig{
				BootstrapExpect: min(n, 3),
				ProbeInterval:   200 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond,
				GossipInterval: 20 * time.Millisecond,
				// A member whose news some missed at the start is seen at
				// the next full exchange: a second, not gossip's 30.
				PushPullInterval: time.Second,
				Autopilot: coord.AutopilotConfig{
					Stabilization: time.Second, DeadThreshold: 2 * time.Second, Interval: 100 * time.Millisecond,
				},
			}
		}
		if o.configure != nil {
			o.configure(i, &cfg)
		}
		c.configs[i] = cfg
		c.disks[i] = storage.NewMemDisk()
	}
	t.Cleanup(c.close)
	if !o.gossip {
		for i := range n {
			c.start(i)
		}
		return c
	}
	// Gossiping members wait in Open to found or join the cell: start
	// them together, each with the gossip addresses of those before it.
	var wg sync.WaitGroup
	errs := make([]error, n)
	delays := make([]time.Duration, n)
	if o.stagger > 0 {
		for i := range n {
			delays[i] = time.Duration(c.rng.Int64N(int64(o.stagger)))
		}
		t.Logf("coordtest: start delays %v", delays)
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delays[i]) // the start order under test, not a wait for a condition
			errs[i] = c.open(i)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("coordtest: open member %s: %v (seed %d)", c.names[i], err, o.seed)
		}
	}
	return c
}

// gossipEndpoint gives member i a fresh gossip endpoint whose seeds are
// the other members' current gossip addresses, and returns it.
func (c *Cluster) gossipEndpoint(i int, cfg *coord.Config) memberlist.Transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	tr, addr := c.gnet.Endpoint(cfg.Name)
	g := *cfg.Gossip
	g.Seeds = nil
	for j, a := range c.gaddrs {
		if j != i && a != "" {
			g.Seeds = append(g.Seeds, a)
		}
	}
	c.gtrs[i], c.gaddrs[i] = tr, addr
	cfg.Gossip = &g
	return tr
}

// memTransport is what transport.Network.Join returns: a Transport with
// the in-memory network's capabilities, which gossipingTransport keeps.
type memTransport interface {
	transport.Transport
	transport.Freezer
	transport.StatsReporter
}

// gossipingTransport is a member's in-memory transport that carries its
// gossip too: the member finds the gossip endpoint on its
// Config.Transport (member.GossipCarrier), so that coord's exported
// configuration needs no field for it.
type gossipingTransport struct {
	memTransport
	gossip memberlist.Transport
}

var _ member.GossipCarrier = gossipingTransport{}

// GossipTransport implements member.GossipCarrier.
func (t gossipingTransport) GossipTransport() memberlist.Transport { return t.gossip }

func (c *Cluster) start(i int) {
	c.t.Helper()
	if err := c.open(i); err != nil {
		c.t.Fatalf("coordtest: open member %s: %v (seed %d)", c.Name(i), err, c.opts.seed)
	}
}

func (c *Cluster) open(i int) error {
	c.mu.Lock()
	cfg := c.configs[i]
	cfg.Disk = c.disks[i]
	c.mu.Unlock()
	tr := c.net.Join(cfg.Name)
	cfg.Transport = tr
	if cfg.Gossip != nil {
		cfg.Transport = gossipingTransport{memTransport: tr.(memTransport), gossip: c.gossipEndpoint(i, &cfg)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*c.opts.timeout)
	defer cancel()
	node, err := coord.Open(ctx, cfg)
	if err != nil {
		tr.Close()
		return err
	}
	c.mu.Lock()
	c.nodes[i], c.trs[i] = node, tr
	c.mu.Unlock()
	if c.opts.clients {
		l := c.mnet.Listen(cfg.Name)
		// Returns when the member closes (or crashes), which closes l.
		go func() { _ = node.Admin().ServeClients(l) }()
	}
	return nil
}

// Connect connects a new client to the cluster (made WithClients): it
// may reach any running member, and moves to another when its member
// fails. Clients are named "client-0", "client-1", ...; adjust the
// config with opts (keep Name: CutClient finds connections by it). The client is closed at the test's cleanup.
func (c *Cluster) Connect(ctx context.Context, opts ...func(*coord.ClientConfig)) (*coord.Client, error) {
	c.t.Helper()
	if !c.opts.clients {
		c.t.Fatalf("coordtest: Connect needs a cluster made WithClients")
	}
	c.mu.Lock()
	if c.clients == nil {
		c.clients = map[*coord.Client]string{}
	}
	name := fmt.Sprintf("client-%d", c.clientSeq)
	c.clientSeq++
	members := slices.Clone(c.names)
	c.mu.Unlock()
	cfg := coord.ClientConfig{Name: name, Members: members, Logger: c.opts.logger, Dial: c.mnet.Dialer(name)}
	for _, f := range opts {
		f(&cfg) // may wrap cfg.Dial, to fail dials on demand
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cl, err := coord.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.clients[cl] = cfg.Name
	c.mu.Unlock()
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl, nil
}

// CutClient cuts the client off from its member, as a partition between
// the two would: nothing arrives either way and neither end sees an
// error. The client notices by its own pings and moves to a member it
// can reach (its next connection is not cut).
func (c *Cluster) CutClient(cl *coord.Client) {
	c.mu.Lock()
	name := c.clients[cl]
	c.mu.Unlock()
	c.mnet.Cut(name)
}

// StartGossiping starts a new member named name that finds the cell by
// gossip and is added by the autopilot; it returns its index. The
// cluster must have been made WithGossip.
func (c *Cluster) StartGossiping(name string) int {
	c.t.Helper()
	c.mu.Lock()
	cfg := c.configs[0]
	cfg.Name, cfg.Addr, cfg.Peers = name, name, nil
	c.mu.Unlock()
	return c.addMember(cfg)
}

// addMember starts a new member with cfg (after WithConfig's adjustment)
// and returns its index.
func (c *Cluster) addMember(cfg coord.Config) int {
	c.t.Helper()
	c.mu.Lock()
	if c.opts.configure != nil {
		c.opts.configure(len(c.names), &cfg)
	}
	i := len(c.names)
	c.names = append(c.names, cfg.Name)
	c.nodes = append(c.nodes, nil)
	c.disks = append(c.disks, storage.NewMemDisk())
	c.trs = append(c.trs, nil)
	c.configs = append(c.configs, cfg)
	c.gtrs = append(c.gtrs, nil)
	c.gaddrs = append(c.gaddrs, "")
	c.mu.Unlock()
	c.start(i)
	return i
}

// Join starts a new member named name that joins the running cell (with
// Config.Join): it starts empty and catches up once a member adds it, e.g.
// c.Leader().Admin().AddLearner(ctx, name, name); its Ready returns once it has
// caught up. It returns the new member's index.
func (c *Cluster) Join(name string) int {
	c.t.Helper()
	c.mu.Lock()
	var peers []coord.Peer
	for _, n := range c.names {
		peers = append(peers, coord.Peer{Name: n, Addr: n})
	}
	cfg := c.configs[0]
	cfg.Name, cfg.Peers, cfg.Join = name, peers, true
	c.mu.Unlock()
	return c.addMember(cfg)
}

// Seed returns the seed the cluster runs with.
func (c *Cluster) Seed() int64 { return c.opts.seed }

// Size returns the number of members started (including crashed ones).
func (c *Cluster) Size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.names)
}

// Name returns member i's name.
func (c *Cluster) Name(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[i]
}

// Node returns member i, or nil while it is crashed.
func (c *Cluster) Node(i int) *coord.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Network returns the in-memory network, for finer faults: drop rate,
// delay, duplication, reordering, one-way blocks.
func (c *Cluster) Network() *transport.Network { return c.net }

// Leader waits until the running members agree on a leader and returns
// it. It fails the test (with the seed) if none emerges in time.
func (c *Cluster) Leader() *coord.Node {
	c.t.Helper()
	i := c.LeaderIndex()
	return c.Node(i)
}

// LeaderIndex is Leader, returning the member's index.
func (c *Cluster) LeaderIndex() int {
	c.t.Helper()
	deadline := time.Now().Add(c.opts.timeout)
	for time.Now().Before(deadline) {
		if i, ok := c.agreedLeader(); ok {
			return i
		}
		time.Sleep(5 * time.Millisecond) // polling Status; there is no event to wait on across members
	}
	c.t.Fatalf("coordtest: no leader within %v (seed %d)", c.opts.timeout, c.opts.seed)
	return -1
}

// agreedLeader finds the member that leads in the highest term and is
// acknowledged by a majority of all members (itself included).
func (c *Cluster) agreedLeader() (int, bool) {
	c.mu.Lock()
	nodes := slices.Clone(c.nodes)
	names := slices.Clone(c.names)
	total := len(nodes)
	for i := range c.retired {
		nodes[i] = nil // neither a candidate nor a vote
		total--
	}
	c.mu.Unlock()
	best, bestTerm := -1, uint64(0)
	for i, n := range nodes {
		if n == nil {
			continue
		}
		if st := n.Status(); st.Role == coord.RoleLeader && st.Term >= bestTerm {
			best, bestTerm = i, st.Term
		}
	}
	if best < 0 {
		return -1, false
	}
	votes := 0
	for _, n := range nodes {
		if n == nil {
			continue
		}
		if st := n.Status(); st.Leader == names[best] && st.Term == bestTerm {
			votes++
		}
	}
	return best, votes > total/2
}

// Partition splits the members into groups that cannot reach each other.
// Members not in any group are isolated.
func (c *Cluster) Partition(groups ...[]int) {
	named := make([][]string, len(groups))
	for g, idx := range groups {
		for _, i := range idx {
			named[g] = append(named[g], c.Name(i))
		}
	}
	c.net.Partition(named...)
	c.gnet.Partition(named...)
}

// Isolate cuts member i off from every other member (not from its
// clients, which notice that it cannot serve and move on).
func (c *Cluster) Isolate(i int) {
	c.net.Isolate(c.Name(i))
	var rest []string
	for j := range c.Size() {
		if j != i {
			rest = append(rest, c.Name(j))
		}
	}
	c.gnet.Partition(rest)
}

// Heal removes every partition and isolation (drop and delay settings stay).
func (c *Cluster) Heal() {
	c.net.Heal()
	c.gnet.Heal()
}

// SetDropRate makes the network lose each message with probability p.
func (c *Cluster) SetDropRate(p float64) { c.net.SetDropRate(p) }

// SetDelay delays each message by a random duration in [min, max].
func (c *Cluster) SetDelay(min, max time.Duration) { c.net.SetDelay(min, max) }

// Crash kills member i as a power cut would: it stops at once, without a
// leadership hand-over, and keeps only what it had synced to its
// in-memory disk (plus a seeded random part of what it had not). Restart
// brings it back on that disk.
func (c *Cluster) Crash(i int) {
	c.t.Helper()
	c.mu.Lock()
	node, tr, gtr := c.nodes[i], c.trs[i], c.gtrs[i]
	c.nodes[i] = nil
	c.gtrs[i], c.gaddrs[i] = nil, ""
	c.mu.Unlock()
	if node == nil {
		c.t.Fatalf("coordtest: member %s is already crashed", c.Name(i))
	}
	if gtr != nil {
		gtr.Shutdown() // silent from now on: the others see it fail, not leave
	}
	// Cutting the transport first means nothing leaves the member after
	// the instant of the crash; the member stops on its closed transport.
	tr.Close() // which thaws a paused member, so that it sees the close
	<-node.Done()
	c.mu.Lock()
	c.disks[i] = c.disks[i].Crash(c.rng)
	c.mu.Unlock()
	node.Close()
}

// Restart reopens crashed member i on its disk.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	running, retired := c.nodes[i] != nil, c.retired[i]
	c.mu.Unlock()
	if running {
		c.t.Fatalf("coordtest: member %s is running", c.Name(i))
	}
	if retired {
		c.t.Fatalf("coordtest: member %s is retired", c.Name(i))
	}
	c.start(i)
}

// Pause freezes member i as SIGSTOP or a long GC pause would: it ticks,
// sends, applies and keeps alive nothing, its timers stand still, and
// what the others send it queues (then drops, once its buffers are
// full), while time goes on for everyone else. Requests made on it wait.
// Its clients see a member that cannot serve: it ends their connections
// after two election timeouts, and they move on. Resume lets it carry on
// with what it had queued: a leader that was replaced meanwhile steps
// down, its sessions may have expired.
func (c *Cluster) Pause(i int) { c.net.Pause(c.Name(i)) }

// Resume ends Pause(i).
func (c *Cluster) Resume(i int) { c.net.Resume(c.Name(i)) }

// Wipe replaces crashed member i's disk with an empty one, as an
// operator who wiped its data directory (or restored an old copy) would.
// Restarted, the member founds nothing: the others know it by its old
// data directory and ignore it, and it stops with coord.ErrStateLost
// (see Node.Err). The way back is RemoveMember, then a new name. With
// WithGossip it is different: the wiped member draws a new incarnation
// and joins again as a new member under the same name (the autopilot
// removes the old one once it is dead).
func (c *Cluster) Wipe(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i] != nil {
		c.t.Fatalf("coordtest: member %s is running; Crash it first", c.names[i])
	}
	c.disks[i] = storage.NewMemDisk()
}

// FailDisk makes every later write and sync on member i's disk fail
// with err, as a dying device (syscall.EIO) or a full one (an
// *os.PathError wrapping syscall.ENOSPC) would; nil heals the disk. The
// member's store faults at its next write and the member stops (Node.Err
// wraps coord.ErrInternal), having acknowledged only what it had synced.
// Crash it then (its disk keeps what was synced, and works again) and
// Restart it.
func (c *Cluster) FailDisk(i int, err error) {
	c.mu.Lock()
	d := c.disks[i]
	c.mu.Unlock()
	d.FailWrites(err)
}

// Retire takes member i out of the cluster for good, once the cell has
// removed it (Admin.RemoveMember): it stops it if it still runs, and
// Leader no longer counts it among the members whose majority must
// agree. Its index stays taken; Restart refuses it.
func (c *Cluster) Retire(i int) {
	c.t.Helper()
	c.mu.Lock()
	node, tr, gtr := c.nodes[i], c.trs[i], c.gtrs[i]
	c.nodes[i] = nil
	c.gtrs[i], c.gaddrs[i] = nil, ""
	if c.retired == nil {
		c.retired = map[int]bool{}
	}
	c.retired[i] = true
	c.mu.Unlock()
	if node == nil {
		return
	}
	if gtr != nil {
		gtr.Shutdown()
	}
	tr.Close()
	node.Close()
}

// Running reports whether member i is up.
func (c *Cluster) Running(i int) bool { return c.Node(i) != nil }

func (c *Cluster) close() {
	c.mu.Lock()
	nodes := slices.Clone(c.nodes)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n == nil {
			continue
		}
		wg.Add(1)
		c.mu.Lock()
		tr := c.trs[i]
		c.mu.Unlock()
		go func() {
			defer wg.Done()
			tr.Close()
			n.Close()
		}()
	}
	wg.Wait()
	c.net.Close()
	if c.opts.gossip {
		awaitMemberlistProbes()
	}
}

// awaitMemberlistProbes waits, a bounded time, for memberlist probes
// under way when their members shut down: memberlist's Shutdown does not
// wait for them, and each ends at its own ack timeout (the probe interval
// times the member's awareness score, seconds at most), so a test's leak
// check would otherwise catch them. A probe still there after the bound
// is left for the leak check to report.
func awaitMemberlistProbes() {
	const probe = "memberlist.(*Memberlist).probeNode"
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte(probe)) {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling goroutine stacks: memberlist gives no signal
	}
}
