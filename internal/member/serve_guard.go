package member

import (
	"context"
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/command"
	pb "go.etcd.io/raft/v3/raftpb"
)

// A member serves clients only while it can: one cut off from the cell's
// leader (or whose Raft side is frozen: a pause, a long stall) can answer
// none of their writes, linearizable reads or keep-alives, and a stopped
// one (removed, failed) nothing at all. It then refuses new clients
// (RefuseNotReady, which a client takes as "try the next member") and
// ends the connections it serves, so their clients move at once instead
// of after their own timeouts. Cut off means out of contact for
// contactGrace election timeouts (standing.go): a change of leader does
// not move anybody.
//
// A member also announces the address it serves clients on to the cell:
// a ConfChangeUpdateNode of its own record (a no-op for Raft), which the
// address book keeps, so that every member can tell a client where all
// the others are (Members), with or without gossip.

// servable says whether the member can serve clients now, and if not why.
func (n *Node) servable() (bool, string) {
	select {
	case <-n.raft.Done():
		if err := n.Err(); err != nil {
			return false, "the member stopped: " + err.Error()
		}
		return false, "the member stopped"
	default:
	}
	if gap := n.outOfContact(); gap > 0 {
		return false, fmt.Sprintf("the member has had no contact with the cell's leader for %v", gap.Round(time.Millisecond))
	}
	return true, ""
}

// startBackground starts, once, the goroutines of a member that serves
// clients: the guard and the announcer. They end at Close.
func (cs *clientServer) startBackground() {
	cs.bgOnce.Do(func() {
		cs.wg.Go(cs.guard)
		cs.wg.Go(cs.announce)
	})
}

// guard ends every client connection while the member cannot serve.
func (cs *clientServer) guard() {
	n := cs.n
	t := time.NewTicker(max(n.electionTimeout()/4, time.Millisecond))
	defer t.Stop()
	serving := true
	for {
		select {
		case <-cs.ctx.Done():
			return
		case <-t.C:
		}
		ok, why := n.servable()
		if ok != serving {
			serving = ok
			if ok {
				n.cfg.Logger.Info("serving clients again", "member", n.cfg.Name)
			} else {
				n.cfg.Logger.Info("cannot serve clients; ending their connections so they move on", "member", n.cfg.Name, "why", why)
			}
		}
		if !ok {
			cs.endConns()
		}
	}
}

// endConns ends every client connection being served.
func (cs *clientServer) endConns() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for c := range cs.live {
		c.cancel()
	}
}

// servedConn is one client connection, for the guard to end.
type servedConn struct{ cancel context.CancelFunc }

// pokeAnnounce asks the announcer to look now (the addresses served
// changed).
func (cs *clientServer) pokeAnnounce() {
	select {
	case cs.announceNow <- struct{}{}:
	default:
	}
}

// announce keeps this member's record in the address book naming the
// address it serves clients on: each election timeout (and when poked)
// it compares, and proposes an update when they differ and the member is
// in contact. A failed proposal (a leader that refuses it, being of an
// older version; a busy configuration) is tried again later, backing off
// to 32 election timeouts.
func (cs *clientServer) announce() {
	n := cs.n
	et := n.electionTimeout()
	wait := et
	t := time.NewTimer(et / 4)
	defer t.Stop()
	for {
		select {
		case <-cs.ctx.Done():
			return
		case <-cs.announceNow:
		case <-t.C:
		}
		switch err := n.announceClientAddr(cs.ctx); {
		case err == nil:
			wait = et
		case cs.ctx.Err() != nil:
			return
		default:
			n.cfg.Logger.Debug("client address not announced; trying again later", "member", n.cfg.Name, "err", err)
			wait = min(2*wait, 32*et)
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
	}
}

// announceClientAddr proposes this member's client address for its
// record in the address book, if the record says otherwise. A member not
// (yet) in the book, or out of contact, proposes nothing.
func (n *Node) announceClientAddr(ctx context.Context) error {
	if ok, _ := n.servable(); !ok {
		return nil
	}
	want := n.clientAdvertAddr()
	id := n.raft.ID()
	rec, ok, err := n.sm.Member(id)
	if err != nil || !ok || rec.ClientAddr == want || rec.Name != n.cfg.Name {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 4*n.electionTimeout())
	defer cancel()
	err = n.raft.ChangeMembership(ctx, pb.ConfChangeUpdateNode, id,
		command.Member{Name: n.cfg.Name, Addr: rec.Addr, ClientAddr: want})
	if err == nil {
		n.cfg.Logger.Debug("announced client address", "member", n.cfg.Name, "addr", want)
	}
	return err
}
