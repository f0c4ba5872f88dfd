package gossip

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrConfig reports a gossip configuration that cannot work.
var ErrConfig = errors.New("gossip: invalid configuration")

// State is a member's health as gossip sees it.
type State string

// The states gossip reports.
const (
	StateAlive State = "alive"
	// StateSuspect: this member's own probe of it went unanswered
	// (memberlist suspects it, and will call it failed unless it refutes
	// in time). memberlist keeps suspicion to itself and tells only of
	// its own probes' failures (in its log), so suspicion that others
	// raised shows here only as a later StateFailed.
	StateSuspect State = "suspect"
	StateFailed  State = "failed"
	StateLeft    State = "left"
)

// Config configures a member's gossip.
type Config struct {
	// Name is the member's name, unique among the gossiping members.
	Name string
	// BindAddr is the UDP and TCP address to gossip on ("host:port"; port
	// 0 picks one). Ignored when Transport is set.
	BindAddr string
	// AdvertiseAddr, when set, is the address the others reach it at.
	AdvertiseAddr string
	// Transport, when set, carries gossip instead of UDP and TCP.
	Transport memberlist.Transport
	// Seeds are gossip addresses to join, retried with backoff until one
	// answers.
	Seeds []string
	// Keys are the gossip encryption keys (16, 24 or 32 bytes); the first
	// is the one used to encrypt. None = plaintext gossip.
	Keys [][]byte
	// Label separates clusters that share a network: a member drops
	// gossip labelled otherwise.
	Label string
	// Meta is what the member says of itself at start.
	Meta Meta
	// ProbeInterval, ProbeTimeout and SuspicionMult tune failure
	// detection; zero = memberlist's LAN defaults.
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	SuspicionMult int
	// GossipInterval is how often state is gossiped; zero = 200ms.
	GossipInterval time.Duration
	// PushPullInterval is how often full state is exchanged; zero = 30s.
	PushPullInterval time.Duration
	Logger           *slog.Logger
}

// Member is a member as gossip knows it.
type Member struct {
	Name  string
	Addr  string // gossip address
	State State
	Since time.Time // when it entered State, as this member saw it
	Meta  Meta
	// BadMeta is set when its metadata did not decode (another version).
	BadMeta bool
}

// Gossip is a running member of the gossip pool.
type Gossip struct {
	ml *memberlist.Memberlist
	// addr is this member's gossip address, read once at start: the
	// local node's fields are memberlist's to change under its own lock.
	addr string
	kr   *memberlist.Keyring
	log  *slog.Logger
	cfg  Config

	mu      sync.Mutex
	members map[string]*Member
	meta    []byte
	changed chan struct{}

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// Start starts gossiping and, in the background, joins the seeds.
func Start(cfg Config) (*Gossip, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: no name", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	meta, err := cfg.Meta.Encode()
	if err != nil {
		return nil, err
	}
	g := &Gossip{
		log: cfg.Logger, cfg: cfg, meta: meta, members: map[string]*Member{},
		changed: make(chan struct{}), stop: make(chan struct{}),
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.Delegate = (*delegate)(g)
	mc.Events = (*events)(g)
	// A member that restarts on a new address keeps its name: let it
	// reclaim the name once its old self is seen dead.
	mc.DeadNodeReclaimTime = time.Second
	mc.Logger = log.New((*logTap)(g), "", 0)
	mc.Ping = (*pinger)(g)
	setIf(&mc.ProbeInterval, cfg.ProbeInterval)
	setIf(&mc.ProbeTimeout, cfg.ProbeTimeout)
	setIf(&mc.SuspicionMult, cfg.SuspicionMult)
	setIf(&mc.GossipInterval, cfg.GossipInterval)
	setIf(&mc.PushPullInterval, cfg.PushPullInterval)
	mc.Label = cfg.Label
	if len(cfg.Keys) > 0 {
		kr, err := memberlist.NewKeyring(cfg.Keys[1:], cfg.Keys[0])
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		mc.Keyring, g.kr = kr, kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
	} else {
		host, port, err := splitAddr(cfg.BindAddr)
		if err != nil {
			return nil, fmt.Errorf("%w: BindAddr: %v", ErrConfig, err)
		}
		mc.BindAddr, mc.BindPort = host, port
		mc.AdvertisePort = port
		if cfg.AdvertiseAddr != "" {
			ah, ap, err := splitAddr(cfg.AdvertiseAddr)
			if err != nil {
				return nil, fmt.Errorf("%w: AdvertiseAddr: %v", ErrConfig, err)
			}
			mc.AdvertiseAddr, mc.AdvertisePort = ah, ap
		}
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("gossip: start: %w", err)
	}
	g.ml = ml
	local := ml.LocalNode()
	g.addr = net.JoinHostPort(local.Addr.String(), strconv.Itoa(int(local.Port)))
	if len(cfg.Seeds) > 0 {
		g.wg.Add(1)
		go g.joinSeeds()
	}
	return g, nil
}

func setIf[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

func splitAddr(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, err
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// joinSeeds retries the seeds with backoff until one answers.
func (g *Gossip) joinSeeds() {
	defer g.wg.Done()
	seeds := slices.DeleteFunc(slices.Clone(g.cfg.Seeds), func(s string) bool { return s == g.Addr() })
	if len(seeds) == 0 {
		return
	}
	wait := 100 * time.Millisecond
	for {
		n, err := g.ml.Join(seeds)
		if n > 0 {
			g.log.Info("gossip joined", "seeds", strings.Join(seeds, ","), "answered", n)
			return
		}
		g.log.Debug("gossip: no seed answered; retrying", "err", err, "in", wait)
		select {
		case <-g.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Addr returns this member's gossip address.
func (g *Gossip) Addr() string { return g.addr }

// Members returns every member gossip knows of, this one included,
// sorted by name.
func (g *Gossip) Members() []Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Member, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Changed returns a channel closed at the next change of Members.
func (g *Gossip) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// SetMeta changes what this member says of itself and gossips it.
func (g *Gossip) SetMeta(m Meta) error {
	data, err := m.Encode()
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.meta = data
	g.mu.Unlock()
	// UpdateNode waits for the broadcast with no bound when given 0.
	return g.ml.UpdateNode(time.Second)
}

// Keyring returns the gossip keyring (nil without encryption), to
// rotate keys: InstallKey everywhere, UseKey, then RemoveKey the old.
func (g *Gossip) Keyring() *memberlist.Keyring { return g.kr }

// Leave tells the others this member is leaving, waiting at most timeout
// for the news to go out, then dwells for drain while it spreads: a
// member that stops right after leaving can still be seen failed by
// those that probed it before they heard.
func (g *Gossip) Leave(timeout, drain time.Duration) error {
	g.mu.Lock()
	meta, _ := DecodeMeta(g.meta)
	g.mu.Unlock()
	meta.Leaving = true
	if err := g.SetMeta(meta); err != nil {
		g.log.Debug("gossip: could not say it is leaving", "err", err)
	}
	err := g.ml.Leave(timeout)
	select {
	case <-time.After(drain):
	case <-g.stop:
	}
	return err
}

// Close stops gossiping (the others will see this member fail unless it
// left first). It is idempotent.
func (g *Gossip) Close() error {
	g.stopOnce.Do(func() { close(g.stop) })
	err := g.ml.Shutdown()
	g.wg.Wait()
	return err
}

// note records what memberlist told of a node (memberlist never calls
// the event delegate concurrently, but Members may run at any time).
func (g *Gossip) note(n *memberlist.Node, st State) {
	m := Member{Name: n.Name, Addr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))), State: st, Since: time.Now()}
	meta, err := DecodeMeta(n.Meta)
	m.Meta, m.BadMeta = meta, err != nil
	g.mu.Lock()
	defer g.mu.Unlock()
	if old, ok := g.members[n.Name]; ok && old.State == st {
		m.Since = old.Since
	}
	g.members[n.Name] = &m
	close(g.changed)
	g.changed = make(chan struct{})
}

// suspect marks name suspect, if gossip holds it alive.
func (g *Gossip) suspect(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m, ok := g.members[name]; ok && m.State == StateAlive {
		m.State, m.Since = StateSuspect, time.Now()
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

// cleared marks name alive again after a suspicion: a probe of it was
// answered.
func (g *Gossip) cleared(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m, ok := g.members[name]; ok && m.State == StateSuspect {
		m.State, m.Since = StateAlive, time.Now()
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

// logTap reads memberlist's log: the only place it tells that one of
// this member's probes went unanswered. Lines go on to the logger at
// debug level.
type logTap Gossip

// suspectLine is how memberlist (v0.5 to v0.7) logs a failed probe.
const suspectLine = "memberlist: Suspect "

func (l *logTap) Write(p []byte) (int, error) {
	line := string(p)
	if i := strings.Index(line, suspectLine); i >= 0 {
		rest := line[i+len(suspectLine):]
		if j := strings.Index(rest, " has failed, no acks received"); j > 0 {
			(*Gossip)(l).suspect(rest[:j])
		}
	}
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(strings.TrimRight(line, "\n"))
	}
	return len(p), nil
}

// pinger hears of answered probes.
type pinger Gossip

func (p *pinger) AckPayload() []byte { return nil }
func (p *pinger) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	(*Gossip)(p).cleared(other.Name)
}

type events Gossip

func (e *events) NotifyJoin(n *memberlist.Node)   { (*Gossip)(e).note(n, StateAlive) }
func (e *events) NotifyUpdate(n *memberlist.Node) { (*Gossip)(e).note(n, StateAlive) }
func (e *events) NotifyLeave(n *memberlist.Node) {
	// memberlist does not say whether the node left or failed (Node.State
	// is not filled in); a leaving member says so in its metadata first.
	st := StateFailed
	if meta, err := DecodeMeta(n.Meta); err == nil && meta.Leaving {
		st = StateLeft
	}
	(*Gossip)(e).note(n, st)
}

type delegate Gossip

func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.meta) > limit {
		return nil
	}
	return slices.Clone(d.meta)
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}
