package raftnode

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// testCellID is the cell ID of every test cell; each member's incarnation
// is fixed too (its index + 1), so frames built by tests are stable.
const testCellID = 0xc0c0

// testCell is a cell of members on an in-memory network, each with an
// in-memory store.
type testCell struct {
	t      testing.TB
	net    *transport.Network
	names  []string
	nodes  []*Node
	stores []*storage.Store
}

func memberName(i int) string { return fmt.Sprintf("m%d", i) }

// newTestCell starts a cell of size founding voters. tweak, if not nil,
// adjusts each member's Config.
func newTestCell(t testing.TB, size int, tweak func(*Config)) *testCell {
	t.Helper()
	c := &testCell{t: t, net: transport.NewNetwork(1)}
	members := map[uint64]storage.MemberInfo{}
	cs := &pb.ConfState{}
	var book []storage.MemberInfo
	for i := range size {
		name := memberName(i)
		id := IDFromName(name)
		c.names = append(c.names, name)
		members[id] = storage.MemberInfo{ID: id, Name: name}
		book = append(book, members[id])
		cs.Voters = append(cs.Voters, id)
	}
	t.Cleanup(c.close)
	for i, name := range c.names {
		st, err := storage.Open(storage.Options{})
		require.NoError(t, err)
		c.stores = append(c.stores, st)
		require.NoError(t, st.Bootstrap(cs, book))
		ident, err := st.SaveIdentity(storage.Identity{CellID: testCellID, Name: name, Incarnation: uint64(i + 1)})
		require.NoError(t, err)
		cfg := Config{
			Name: name, Identity: ident, Members: members, Store: st, Transport: c.net.Join(name),
			TickInterval: 20 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
			CompactEvery: 1000, CatchUpEntries: 100, MaxSizePerMsg: 1 << 20,
		}
		if tweak != nil {
			tweak(&cfg)
		}
		n, err := Start(cfg)
		require.NoError(t, err)
		c.nodes = append(c.nodes, n)
	}
	return c
}

func (c *testCell) close() {
	for _, n := range c.nodes {
		n.Resume()
		n.Stop(false)
	}
	c.net.Close()
	for _, st := range c.stores {
		st.Close()
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// bound (the machine may be busy).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// leader waits for a member that leads and that the others, except
// those in skip, follow; it returns its index.
func (c *testCell) leader(skip ...int) int {
	c.t.Helper()
	lead := -1
	waitFor(c.t, "a leader", func() bool {
		lead = -1
		var id uint64
		for i, n := range c.nodes {
			if slices.Contains(skip, i) {
				continue
			}
			st := n.Status()
			if st.Role == RoleLeader {
				lead, id = i, st.ID
			}
		}
		if lead < 0 {
			return false
		}
		for i, n := range c.nodes {
			if !slices.Contains(skip, i) && n.Status().Leader != id {
				return false
			}
		}
		return true
	})
	return lead
}

func putCmd(key, value string) *command.Command {
	return &command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{{Type: command.OpPut, Key: key, Value: []byte(value)}}}}
}

func (c *testCell) put(i int, key, value string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.nodes[i].Propose(ctx, putCmd(key, value))
	require.NoError(c.t, err)
}

// data returns member i's keys and values.
func (c *testCell) data(i int) map[string]string {
	c.t.Helper()
	out, err := c.dataOf(i)
	require.NoError(c.t, err)
	return out
}

func (c *testCell) dataOf(i int) (map[string]string, error) {
	kvs, _, err := c.stores[i].StateMachine().List("")
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv.Key] = string(kv.Value)
	}
	return out, err
}

// converged waits until every member has applied the same index as the
// leader's commit and holds the same data, and returns that data.
func (c *testCell) converged() map[string]string {
	c.t.Helper()
	lead := c.leader()
	var want map[string]string
	waitFor(c.t, "members to converge", func() bool {
		commit := c.nodes[lead].Status().Commit
		for _, n := range c.nodes {
			if n.AppliedIndex() < commit {
				return false
			}
		}
		want = c.data(lead)
		for i := range c.nodes {
			if fmt.Sprint(c.data(i)) != fmt.Sprint(want) {
				return false
			}
		}
		return true
	})
	return want
}

// header returns the envelope header member i sends with.
func (c *testCell) header(i int) header {
	return header{cell: testCellID, incarnation: uint64(i + 1)}
}

// deliver hands env to member i's raft loop as if it had arrived, and
// returns once it has been handled (or the member stopped).
func (c *testCell) deliver(i int, env transport.Envelope) {
	n := c.nodes[i]
	env.To = n.cfg.Name
	done := make(chan struct{})
	n.runOnLoop(func() {
		defer close(done)
		n.c.Step(env)
		for n.c.HasReady() {
			if !n.handleReady(n.c.Ready()) {
				return
			}
		}
	})
	select {
	case <-done:
	case <-n.Done():
	}
}

// deliverRaft sends m to member to as member from would (from < 0: a
// stranger named "intruder").
func (c *testCell) deliverRaft(to, from int, m *pb.Message) {
	c.t.Helper()
	name, h := "intruder", header{cell: testCellID, incarnation: 99}
	if from >= 0 {
		name, h = c.names[from], c.header(from)
	}
	data, err := h.encodeRaft(m)
	require.NoError(c.t, err)
	c.deliver(to, transport.Envelope{From: name, Data: data})
}

// requireRunning fails the test if a member stopped.
func (c *testCell) requireRunning() {
	c.t.Helper()
	for i, n := range c.nodes {
		require.NoError(c.t, n.Err(), "member %d", i)
	}
}

// onLoop runs f on member n's raft loop, as the core's driver, and waits
// for it (or for the member to stop).
func onLoop(n *Node, f func()) {
	done := make(chan struct{})
	n.runOnLoop(func() {
		defer close(done)
		f()
	})
	select {
	case <-done:
	case <-n.Done():
	}
}

// checkRaft runs member n's wire checks on m, on its raft loop.
func checkRaft(n *Node, from string, m *pb.Message) (err error) {
	onLoop(n, func() { err = n.c.checkRaft(from, m) })
	return err
}
