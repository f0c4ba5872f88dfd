package member

import (
	"context"
	"slices"
	"time"

	"github.com/coordcell/coord/internal/autopilot"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/gossip"
	"github.com/coordcell/coord/transport"
	pb "go.etcd.io/raft/v3/raftpb"
)

// startAutopilot runs the member's gossip upkeep and, while it leads,
// the autopilot.
func (n *Node) startAutopilot() {
	gs := n.gossip
	if gs == nil {
		return
	}
	ac := gs.cfg.Autopilot
	ap := autopilot.New(autopilot.Config{
		Voters: ac.Voters, Stabilization: ac.Stabilization, DeadThreshold: ac.DeadThreshold,
		ContactThreshold: 2 * n.electionTimeout(),
	})
	every := ac.Interval
	if every == 0 {
		every = time.Second
	}
	gs.wg.Add(1)
	go func() {
		defer gs.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-gs.stop:
				return
			case <-n.raft.Done():
				return
			case <-t.C:
			}
			n.gossipUpkeep()
			if !ac.Disabled {
				n.autopilotRound(ap)
			}
		}
	}()
}

// gossipUpkeep says the cell's ID once this member has learnt it, and
// gives the transport the addresses gossip knows for the cell's members
// (a member that restarted on a new address is found again).
func (n *Node) gossipUpkeep() {
	gs := n.gossip
	if cell := n.raft.CellID(); cell != 0 {
		gs.mu.Lock()
		stale := gs.meta.Cell != cell
		gs.mu.Unlock()
		if stale {
			gs.setMeta(func(m *gossip.Meta) { m.Cell = cell })
		}
	}
	adder, _ := n.tr.(transport.PeerAdder)
	now := time.Now()
	inGossip := map[uint64]bool{}
	for _, m := range gs.g.Members() {
		if m.BadMeta || m.Meta.ID == 0 {
			continue
		}
		gs.mu.Lock()
		gs.lastMeta[m.Meta.ID] = m.Meta
		gs.mu.Unlock()
		inGossip[m.Meta.ID] = true
		if id, ok := n.raft.MemberID(m.Name); ok && id == m.Meta.ID && adder != nil && m.State == gossip.StateAlive && m.Meta.Addr != "" {
			adder.AddPeer(m.Name, m.Meta.Addr)
		}
	}
	ms, err := n.members()
	if err != nil {
		return
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for _, m := range ms {
		if inGossip[m.ID] {
			delete(gs.unknown, m.ID)
		} else if _, ok := gs.unknown[m.ID]; !ok {
			gs.unknown[m.ID] = now
		}
	}
}

// servers is the autopilot's view: the configured members and the new
// ones gossip brings, with their health.
func (n *Node) servers(prs map[uint64]apProgress, self uint64) ([]autopilot.Server, error) {
	gs := n.gossip
	ms, err := n.members()
	if err != nil {
		return nil, err
	}
	byName := map[string]gossip.Member{}
	for _, m := range gs.g.Members() {
		byName[m.Name] = m
	}
	now := time.Now()
	var out []autopilot.Server
	configured := map[string]bool{}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for _, m := range ms {
		configured[m.Name] = true
		s := autopilot.Server{ID: m.ID, Name: m.Name, Addr: m.Addr, InConfig: true, Voter: !m.Learner,
			Leader: m.ID == self, MayVote: true, Health: autopilot.Unknown, HealthSince: gs.unknown[m.ID]}
		if s.HealthSince.IsZero() {
			s.HealthSince = now
		}
		if meta, ok := gs.lastMeta[m.ID]; ok {
			s.Zone, s.MayVote = meta.Zone, !meta.NoVote
		}
		if g, ok := byName[m.Name]; ok && g.Meta.ID == m.ID {
			s.Health, s.HealthSince = autopilot.Health(g.State), g.Since
		}
		if pr, ok := prs[m.ID]; ok {
			s.Match = pr.match
			if pr.active {
				s.LastContact = now
			}
		}
		out = append(out, s)
	}
	cell := n.raft.CellID()
	for _, g := range byName {
		if configured[g.Name] || g.BadMeta || g.State != gossip.StateAlive || g.Meta.ID == 0 || g.Meta.Cell != cell {
			continue
		}
		if removed, err := n.sm.WasRemoved(g.Meta.ID); err != nil || removed {
			continue
		}
		out = append(out, autopilot.Server{ID: g.Meta.ID, Name: g.Name, Addr: g.Meta.Addr, Zone: g.Meta.Zone,
			MayVote: !g.Meta.NoVote, Health: autopilot.Alive, HealthSince: g.Since})
	}
	slices.SortFunc(out, func(a, b autopilot.Server) int { return compareStrings(a.Name, b.Name) })
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

type apProgress struct {
	match  uint64
	active bool
}

// autopilotRound makes at most one membership change, on the leader.
func (n *Node) autopilotRound(ap *autopilot.Autopilot) {
	ctx, cancel := context.WithTimeout(n.closing, 4*n.electionTimeout())
	defer cancel()
	raw, last, leading, err := n.raft.Replication(ctx)
	if err != nil || !leading {
		return
	}
	prs := map[uint64]apProgress{}
	for id, pr := range raw {
		prs[id] = apProgress{match: pr.Match, active: pr.RecentActive}
	}
	servers, err := n.servers(prs, n.raft.ID())
	if err != nil {
		return
	}
	d := ap.Decide(servers, last, time.Now())
	dec := Decision{Action: string(d.Action), Member: d.Server.Name, Reason: d.Reason, At: d.At}
	m := command.Member{Name: d.Server.Name, Addr: d.Server.Addr}
	switch d.Action {
	case autopilot.AddLearner:
		err = n.raft.ChangeMembership(ctx, pb.ConfChangeAddLearnerNode, d.Server.ID, m)
	case autopilot.Promote:
		err = n.raft.ChangeMembership(ctx, pb.ConfChangeAddNode, d.Server.ID, m)
	case autopilot.Demote:
		err = n.raft.ChangeMembership(ctx, pb.ConfChangeAddLearnerNode, d.Server.ID, m)
	case autopilot.Remove:
		err = n.raft.ChangeMembership(ctx, pb.ConfChangeRemoveNode, d.Server.ID, command.Member{Name: d.Server.Name})
	}
	if err != nil {
		dec.Err = err.Error()
	}
	if d.Action != autopilot.None {
		n.gossip.log.Info("autopilot", "action", dec.Action, "member", dec.Member, "reason", dec.Reason, "err", dec.Err)
	}
	n.gossip.mu.Lock()
	if d.Action != autopilot.None || n.gossip.decision.Action == "none" {
		n.gossip.decision = dec
	}
	n.gossip.mu.Unlock()
}

// Autopilot returns the autopilot's last decision on this member (when
// it led) and why; the zero value without gossip.
func (n *Node) Autopilot() Decision {
	if n.gossip == nil {
		return Decision{}
	}
	n.gossip.mu.Lock()
	defer n.gossip.mu.Unlock()
	return n.gossip.decision
}

// decorate adds what gossip and the autopilot know to the members.
func (n *Node) decorate(ms []Member) []Member {
	for i := range ms {
		ms[i].Role = memberVoter
		if ms[i].Learner {
			ms[i].Role = memberLearner
		}
		ms[i].Health = gossipUnknown
	}
	gs := n.gossip
	if gs == nil {
		return ms
	}
	byName := map[string]gossip.Member{}
	for _, m := range gs.g.Members() {
		byName[m.Name] = m
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for i := range ms {
		m := &ms[i]
		if meta, ok := gs.lastMeta[m.ID]; ok {
			m.Zone = meta.Zone
			if m.Learner && !meta.NoVote {
				m.Role = memberStandby
			}
		}
		if g, ok := byName[m.Name]; ok && g.Meta.ID == m.ID {
			m.Health = string(g.State)
		}
	}
	return ms
}
