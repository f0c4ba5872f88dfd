package member

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/gossip"
	"github.com/coordcell/coord/raftnode"
	"github.com/coordcell/coord/storage"
	"github.com/hashicorp/memberlist"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Decision is the autopilot's last decision and why (the root's
// Decision).
type Decision struct {
	Action string // none, add-learner, promote, demote, remove
	Member string
	Reason string
	At     time.Time
	Err    string // the change failed, when set
}

// A member's health as gossip sees it, and its role, as Members reports
// them (the root's gossipAlive..., memberVoter...).
const (
	gossipAlive   = "alive"
	gossipSuspect = "suspect"
	gossipFailed  = "failed"
	gossipLeft    = "left"
	gossipUnknown = "unknown"

	memberVoter   = "voter"
	memberLearner = "learner"
	memberStandby = "standby"
)

// gossiper is a member's gossip and autopilot.
type gossiper struct {
	cfg  GossipConfig
	g    *gossip.Gossip
	log  *slog.Logger
	self uint64

	mu       sync.Mutex
	meta     gossip.Meta
	lastMeta map[uint64]gossip.Meta // by Raft ID, kept after a member fails
	unknown  map[uint64]time.Time   // since when a configured member is not in gossip
	decision Decision

	stop chan struct{}
	wg   sync.WaitGroup
}

// gossipRaftID is the Raft ID of a member that gossip brings in: its
// name and its data directory's incarnation, so a member that comes back
// with a new directory under a removed name is a new member.
func gossipRaftID(name string, incarnation uint64) uint64 {
	h := sha256.Sum256(binary.BigEndian.AppendUint64([]byte("coord member v1\x00"+name+"\x00"), incarnation))
	if id := binary.BigEndian.Uint64(h[:8]); id != 0 {
		return id
	}
	return 1
}

// prepareMember readies the store as prepareStore does; with gossip it
// starts gossiping and, on a member with no state, waits (bounded by
// ctx) until it founds a cell or finds one to join. It returns the Raft
// ID to run with (0 = derived from the name).
func prepareMember(ctx context.Context, store *storage.Store, cfg *Config) (storage.Identity, map[uint64]storage.MemberInfo, uint64, *gossiper, error) {
	if cfg.Gossip == nil {
		ident, members, err := prepareStore(store, cfg)
		return ident, members, 0, nil, err
	}
	gc := *cfg.Gossip
	if cfg.gossipTransport() == nil && gc.BindAddr == "" {
		return storage.Identity{}, nil, 0, nil, fmt.Errorf("%w: Gossip.BindAddr is required", errs.InvalidConfig)
	}
	if len(cfg.Peers) > 0 || cfg.Join {
		// Static founding or joining; gossip finds addresses and runs
		// the autopilot.
		ident, members, err := prepareStore(store, cfg)
		if err != nil {
			return ident, nil, 0, nil, err
		}
		return startGossiper(ctx, store, cfg, ident, members, raftIDOf(members, cfg.Name, 0))
	}
	ident, ok, err := store.Identity()
	if err != nil {
		return storage.Identity{}, nil, 0, nil, fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	if ok && ident.Name != cfg.Name {
		return storage.Identity{}, nil, 0, nil, fmt.Errorf("%w: the data directory belongs to member %q, not %q",
			errs.InvalidConfig, ident.Name, cfg.Name)
	}
	if !ok || store.IsNew() {
		// A member still new, with an identity, died while it waited to
		// found or join: a fresh incarnation makes it another voter, so a
		// founding vote it may have cast and forgotten is never
		// contradicted by a second vote of the same voter (formOrJoin).
		if ident, err = store.SaveIdentity(storage.Identity{Name: cfg.Name}); err != nil {
			return storage.Identity{}, nil, 0, nil, fmt.Errorf("%w: %w", errs.DataDir, err)
		}
	}
	members := map[uint64]storage.MemberInfo{}
	known, err := store.StateMachine().Members()
	if err != nil {
		return storage.Identity{}, nil, 0, nil, fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	for _, m := range known {
		members[m.ID] = m
	}
	return startGossiper(ctx, store, cfg, ident, members, raftIDOf(members, cfg.Name, gossipRaftID(cfg.Name, ident.Incarnation)))
}

// raftIDOf is the ID the cell knows name by, else def.
func raftIDOf(members map[uint64]storage.MemberInfo, name string, def uint64) uint64 {
	for id, m := range members {
		if m.Name == name {
			return id
		}
	}
	return def
}

func startGossiper(ctx context.Context, store *storage.Store, cfg *Config, ident storage.Identity,
	members map[uint64]storage.MemberInfo, self uint64) (storage.Identity, map[uint64]storage.MemberInfo, uint64, *gossiper, error) {
	gc := *cfg.Gossip
	gs := &gossiper{
		cfg: gc, log: cfg.Logger.With("member", cfg.Name), self: self,
		lastMeta: map[uint64]gossip.Meta{}, unknown: map[uint64]time.Time{}, stop: make(chan struct{}),
		decision: Decision{Action: "none", Reason: "not leading"},
	}
	self0 := self
	if self0 == 0 {
		self0 = raftnode.IDFromName(cfg.Name)
	}
	gs.self = self0
	gs.meta = gossip.Meta{
		Cell: ident.CellID, ID: self0, Incarnation: ident.Incarnation, Addr: cfg.Addr,
		Zone: gc.Zone, NoVote: gc.NoVote, Expect: gc.BootstrapExpect,
	}
	g, err := gossip.Start(gossip.Config{
		Name: cfg.Name, BindAddr: gc.BindAddr, AdvertiseAddr: gc.AdvertiseAddr, Transport: cfg.gossipTransport(),
		Seeds: gc.Seeds, Keys: gc.Keys, Meta: gs.meta, Logger: gs.log,
		ProbeInterval: gc.ProbeInterval, ProbeTimeout: gc.ProbeTimeout, GossipInterval: gc.GossipInterval,
		PushPullInterval: gc.PushPullInterval,
	})
	if err != nil {
		return ident, nil, 0, nil, fmt.Errorf("%w: %w", errs.Listen, err)
	}
	gs.g = g
	if !store.IsNew() || len(members) > 0 && cfg.Join {
		return ident, members, self, gs, nil
	}
	if len(cfg.Peers) > 0 {
		return ident, members, self, gs, nil
	}
	ident, members, err = gs.formOrJoin(ctx, store, cfg, ident)
	if err != nil {
		g.Close()
		return ident, nil, 0, nil, err
	}
	return ident, members, self0, gs, nil
}

// formOrJoin waits until this new member either sees a cell in gossip
// (and joins it) or founds one with BootstrapExpect members.
//
// Founding is by rounds of votes, so that members with different views
// never found two cells from overlapping members. Once its view of the
// members waiting to found has not changed for a settling time and every
// member in it says the same view, a member casts its one vote of the
// round: for the BootstrapExpect lowest names of the view if it is one of
// them, else a nay (a vote for no set). It founds when every member of
// its set (same names, same incarnations) has voted for the same set in
// the same round.
//
// A member leaves a round in which it voted for a set only with proof
// that the set cannot win there: a member of the set voted otherwise in
// the round (a set or a nay), or has moved past the round. A member that
// voted nay, or has not voted yet, moves to the latest round it sees
// among the waiting members, for it cannot help any set win in the
// rounds it leaves.
//
// Why two cells cannot form (in one gossip pool; BootstrapExpect is
// assumed, as in Consul, to be set the same on members that can reach
// each other). Say set A founded from round a and set B from round b.
// Founding from a needs every member of A to have voted A in a; a
// member votes at most once per round, and a vote is never withdrawn
// within its round. No member of A ever leaves round a: the first to
// leave would need a member of A that voted otherwise in a (none did)
// or that moved past a before it (none did, it is the first). So a
// member in both A and B voted in b too, hence b > a and it left a:
// impossible. A and B are thus disjoint; a member of B only votes while
// it sees no cell, and votes for the lowest names of a view all its
// members share, so B's members saw A's members neither waiting (A's
// members sort below B's or A would not be the lowest of its view, or
// the views disagreed, which blocks the vote) nor in a cell: only a
// partition of the gossip pool that hides A's members from B's gives
// two cells, which no protocol avoids without a fixed founding list
// (Peers). A member that restarts while still new draws a new
// incarnation (prepareMember), so a vote it cast before it died is never
// contradicted by a second vote of the same member in the same round.
//
// Liveness: once every member has started and the views agree, the
// lowest set's members vote for it in the latest round (the others say
// nay or catch up to it), and any older vote for another set loses to a
// nay or a set vote of one of its members. A member of a set that dies
// before it votes, or restarts, holds the others of that set in their
// round (safety first: its vote may have been counted somewhere);
// Open's deadline then reports errs.NoQuorum.
func (gs *gossiper) formOrJoin(ctx context.Context, store *storage.Store, cfg *Config, ident storage.Identity) (storage.Identity, map[uint64]storage.MemberInfo, error) {
	expect := gs.cfg.BootstrapExpect
	settle := max(gs.cfg.ProbeInterval, 2*gs.cfg.GossipInterval)
	if settle == 0 {
		settle = time.Second
	}
	var lastView uint64
	viewSince := time.Now()
	var (
		voted bool
		vote  []gossip.Member // the set voted for in round; nil with voted = a nay
		round int
	)
	for {
		changed := gs.g.Changed()
		ms := gs.g.Members()
		// A founder that has seen everyone's vote founds, even if another
		// founder was quicker to say the cell exists.
		if vote != nil && gs.agreed(vote, round, ms) {
			return gs.found(store, cfg, ident, vote)
		}
		// An existing cell wins.
		for _, m := range ms {
			if m.Name != cfg.Name && m.State == gossip.StateAlive && !m.BadMeta && m.Meta.Cell != 0 {
				return gs.join(ctx, cfg, ident, m.Meta.Cell, settle)
			}
		}
		if expect > 0 && !gs.cfg.NoVote {
			var waiting []gossip.Member
			latest := round
			for _, m := range ms {
				if m.State == gossip.StateAlive && !m.BadMeta && m.Meta.Cell == 0 && m.Meta.Expect == expect && !m.Meta.NoVote {
					waiting = append(waiting, m)
					latest = max(latest, m.Meta.Round)
				}
			}
			view := viewDigest(waiting)
			if view != lastView {
				lastView, viewSince = view, time.Now()
				gs.setMeta(func(m *gossip.Meta) { m.View = view })
			}
			next := round
			if vote != nil && gs.lost(vote, round, ms, cfg.Name) {
				next = max(round+1, latest)
			} else if vote == nil && latest > round {
				next = latest // no vote here, or a nay: nothing of ours can win this round
			}
			if next != round {
				gs.log.Info("bootstrap: next round", "round", next, "voted", voted, "founders", names(vote))
				voted, vote, round = false, nil, next
				gs.setMeta(func(m *gossip.Meta) { m.Vote, m.Round = 0, round })
			}
			if !voted && len(waiting) >= expect && time.Since(viewSince) >= settle &&
				!slices.ContainsFunc(waiting, func(m gossip.Member) bool { return m.Meta.View != view }) {
				set := waiting[:expect]
				voted = true
				if slices.ContainsFunc(set, func(m gossip.Member) bool { return m.Name == cfg.Name }) {
					vote = slices.Clone(set)
					gs.setMeta(func(m *gossip.Meta) { m.Vote = voteDigest(vote, round) })
					gs.log.Info("bootstrap: voted to found the cell", "round", round, "founders", names(vote))
				} else {
					gs.setMeta(func(m *gossip.Meta) { m.Vote = nayDigest(round) })
					gs.log.Info("bootstrap: voted nay (not among the founders)", "round", round, "founders", names(set))
				}
			}
			if vote != nil && gs.agreed(vote, round, ms) {
				return gs.found(store, cfg, ident, vote)
			}
		}
		select {
		case <-ctx.Done():
			return ident, nil, fmt.Errorf("%w: waiting to found or join a cell: %w", errs.NoQuorum, ctx.Err())
		case <-changed:
		case <-time.After(settle / 4):
		}
	}
}

func names(ms []gossip.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

func viewDigest(ms []gossip.Member) uint64 {
	h := sha256.New()
	for _, m := range ms {
		h.Write([]byte(m.Name))
		h.Write(binary.BigEndian.AppendUint64([]byte{0}, m.Meta.Incarnation))
	}
	return binary.BigEndian.Uint64(h.Sum(nil)) | 1
}

func voteDigest(set []gossip.Member, round int) uint64 {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(round)))
	for _, m := range set {
		h.Write([]byte(m.Name))
		h.Write(binary.BigEndian.AppendUint64(nil, m.Meta.Incarnation))
	}
	return binary.BigEndian.Uint64(h.Sum(nil)) | 1
}

// nayDigest is the vote of a member that is not among the founders its
// view gives in round: never equal to a set's vote, so it tells that
// set's members they cannot win, and joiners never take it for a
// founder's ballot.
func nayDigest(round int) uint64 {
	h := sha256.New()
	h.Write([]byte("coord founding nay v1\x00"))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(round)))
	return binary.BigEndian.Uint64(h.Sum(nil)) | 1
}

// same finds set member s in ms: same name and same incarnation (a
// member that came back with a new incarnation is another voter).
func same(ms []gossip.Member, s gossip.Member) int {
	return slices.IndexFunc(ms, func(m gossip.Member) bool {
		return m.Name == s.Name && !m.BadMeta && m.Meta.Incarnation == s.Meta.Incarnation
	})
}

// agreed reports whether every member of set, alive, votes for it in
// round.
func (gs *gossiper) agreed(set []gossip.Member, round int, ms []gossip.Member) bool {
	want := voteDigest(set, round)
	for _, s := range set {
		i := same(ms, s)
		if i < 0 || ms[i].State != gossip.StateAlive || ms[i].Meta.Vote != want || ms[i].Meta.Round != round {
			return false
		}
	}
	return true
}

// lost reports whether set can no longer win round: another member of
// it voted otherwise in the round, or has moved past the round (which it
// does only when its own vote could not win, so the set never did).
func (gs *gossiper) lost(set []gossip.Member, round int, ms []gossip.Member, self string) bool {
	want := voteDigest(set, round)
	for _, s := range set {
		if s.Name == self {
			continue
		}
		i := same(ms, s)
		if i < 0 || ms[i].Meta.Cell != 0 {
			continue
		}
		mm := ms[i].Meta
		if mm.Round > round || mm.Round == round && mm.Vote != 0 && mm.Vote != want {
			return true
		}
	}
	return false
}

func (gs *gossiper) found(store *storage.Store, cfg *Config, ident storage.Identity, set []gossip.Member) (storage.Identity, map[uint64]storage.MemberInfo, error) {
	cs := &pb.ConfState{}
	members := map[uint64]storage.MemberInfo{}
	var book []storage.MemberInfo
	h := sha256.New()
	h.Write([]byte("coord gossip cell v1\x00" + cfg.CellName))
	for _, m := range set {
		info := storage.MemberInfo{ID: m.Meta.ID, Name: m.Name, Addr: m.Meta.Addr}
		members[info.ID] = info
		book = append(book, info)
		cs.Voters = append(cs.Voters, info.ID)
		h.Write([]byte{0})
		h.Write([]byte(m.Name))
		h.Write(binary.BigEndian.AppendUint64(nil, m.Meta.Incarnation))
	}
	cell := binary.BigEndian.Uint64(h.Sum(nil)) | 1
	ident.CellID = cell
	var err error
	if ident, err = store.SaveIdentity(ident); err != nil {
		return ident, nil, fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	if err := store.Bootstrap(cs, book); err != nil {
		return ident, nil, fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	// The vote stays: a founder slower to see the votes still finds them.
	gs.setMeta(func(m *gossip.Meta) { m.Cell = cell })
	gs.log.Info("bootstrap: founded the cell", "cell", fmt.Sprintf("%016x", cell), "founders", names(set))
	return ident, members, nil
}

// join starts this member as a learner-to-be of cell: it reaches the
// cell's members gossip knows, and the leader's autopilot adds it.
//
// Raft on a new member drops messages from senders it does not know, so
// before it starts it must know the leader: every member that says it
// is in the cell, and the founders, who may not say so yet (they keep
// their founding vote, so members with the same vote as a cell member
// are founders). It waits, a bounded time, until all founders are seen
// (after that, e.g. when no founder is left, it goes with what it has).
func (gs *gossiper) join(ctx context.Context, cfg *Config, ident storage.Identity, cell uint64, settle time.Duration) (storage.Identity, map[uint64]storage.MemberInfo, error) {
	deadline := time.Now().Add(10 * settle)
	for {
		changed := gs.g.Changed()
		members, complete := cellMembers(gs.g.Members(), cfg.Name, cell)
		if complete || time.Now().After(deadline) || ctx.Err() != nil {
			gs.setMeta(func(m *gossip.Meta) { m.Cell, m.Vote, m.View = cell, 0, 0 })
			gs.log.Info("bootstrap: joining the cell found in gossip", "cell", fmt.Sprintf("%016x", cell), "members", len(members))
			return ident, members, nil
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-time.After(settle / 4):
		}
	}
}

// cellMembers returns the members of cell gossip shows (but self), and
// whether every founder of the cell is among them.
func cellMembers(ms []gossip.Member, self string, cell uint64) (map[uint64]storage.MemberInfo, bool) {
	type ballot struct {
		vote  uint64
		round int
	}
	expect := map[ballot]int{}
	for _, m := range ms {
		if !m.BadMeta && m.Meta.Cell == cell && m.Meta.Vote != 0 {
			expect[ballot{m.Meta.Vote, m.Meta.Round}] = m.Meta.Expect
		}
	}
	members := map[uint64]storage.MemberInfo{}
	seen := map[ballot]int{}
	for _, m := range ms {
		if m.BadMeta || m.Meta.ID == 0 || m.Name == self {
			continue
		}
		b := ballot{m.Meta.Vote, m.Meta.Round}
		_, founder := expect[b]
		if m.Meta.Cell != cell && !(founder && m.Meta.Cell == 0) {
			continue
		}
		members[m.Meta.ID] = storage.MemberInfo{ID: m.Meta.ID, Name: m.Name, Addr: m.Meta.Addr}
		if founder {
			seen[b]++
		}
	}
	// A joiner is seen in the cell before the founders' votes reach this
	// member: without a founder's ballot the founders are unknown.
	if len(expect) == 0 {
		return members, false
	}
	for b, n := range expect {
		if seen[b] < n {
			return members, false
		}
	}
	return members, true
}

func (gs *gossiper) setMeta(f func(*gossip.Meta)) {
	gs.mu.Lock()
	f(&gs.meta)
	m := gs.meta
	gs.mu.Unlock()
	if err := gs.g.SetMeta(m); err != nil {
		gs.log.Warn("gossip: could not update metadata", "err", err)
	}
}

// leave tells the others this member leaves for good (Close).
func (gs *gossiper) leave() {
	if gs == nil {
		return
	}
	gs.closeLoop()
	drain := 3 * max(gs.cfg.GossipInterval, 20*time.Millisecond)
	if err := gs.g.Leave(time.Second, drain); err != nil {
		gs.log.Debug("gossip: leave", "err", err)
	}
}

func (gs *gossiper) closeLoop() {
	select {
	case <-gs.stop:
	default:
		close(gs.stop)
	}
	gs.wg.Wait()
}

func (gs *gossiper) close() {
	if gs == nil {
		return
	}
	gs.closeLoop()
	gs.g.Close()
}

var errNoGossip = errors.New("coord: this member does not gossip")

// GossipKeyring returns the gossip keyring, to rotate keys on every
// member: InstallKey(new), then UseKey(new), then RemoveKey(old).
func (n *Node) GossipKeyring() (*memberlist.Keyring, error) {
	if n.gossip == nil || n.gossip.g.Keyring() == nil {
		return nil, errNoGossip
	}
	return n.gossip.g.Keyring(), nil
}
