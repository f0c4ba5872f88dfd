package etcdapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
)

// TestLockService: etcd's v3lock service is coord's Mutex: a second
// Lock waits for the first's Unlock, and a Go coord.Mutex of the same
// name is excluded while an etcd client holds it.
func TestLockService(t *testing.T) {
	f := newFront(t, nil)
	ctx := tctx(t)
	c0, c1 := f.client(t, f.eps[0]), f.client(t, f.eps[1])
	l0, l1 := v3lockpb.NewLockClient(c0.ActiveConnection()), v3lockpb.NewLockClient(c1.ActiveConnection())
	g0, err := c0.Grant(ctx, 10)
	require.NoError(t, err)
	g1, err := c1.Grant(ctx, 10)
	require.NoError(t, err)

	r0, err := l0.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("job"), Lease: int64(g0.ID)})
	require.NoError(t, err)
	assert.Contains(t, string(r0.Key), "job")

	got := make(chan *v3lockpb.LockResponse, 1)
	go func() {
		r, err := l1.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("job"), Lease: int64(g1.ID)})
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- r
	}()
	// A Go holder of the same lock is refused while the etcd client holds it.
	s, err := f.c.Node(2).NewSession(ctx, coord.WithTTL(5*time.Second))
	require.NoError(t, err)
	defer s.Close(context.Background())
	_, err = coord.NewMutex(s, "job").TryLock(ctx)
	require.ErrorIs(t, err, coord.ErrLocked)
	select {
	case <-got:
		t.Fatal("second Lock granted while the first holds")
	case <-time.After(200 * time.Millisecond): // a window for a wrong grant to show, not a wait for a condition
	}
	_, err = l0.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r0.Key})
	require.NoError(t, err)
	r1 := <-got
	require.NotNil(t, r1)
	assert.Greater(t, r1.Header.Revision, r0.Header.Revision, "the later grant has the later token")
	_, err = l1.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r1.Key})
	require.NoError(t, err)
	tok, err := coord.NewMutex(s, "job").TryLock(ctx)
	require.NoError(t, err, "free again")
	assert.NotZero(t, tok)
}

// TestElectionService: etcd's v3election service over coord's Election:
// Campaign, Leader, Observe, Proclaim, Resign, and a Go candidate of the
// same group queues behind an etcd one.
func TestElectionService(t *testing.T) {
	f := newFront(t, nil)
	ctx := tctx(t)
	c0, c1 := f.client(t, f.eps[0]), f.client(t, f.eps[1])
	e0, e1 := v3electionpb.NewElectionClient(c0.ActiveConnection()), v3electionpb.NewElectionClient(c1.ActiveConnection())
	g0, err := c0.Grant(ctx, 10)
	require.NoError(t, err)

	_, err = e1.Leader(ctx, &v3electionpb.LeaderRequest{Name: []byte("grp")})
	require.Error(t, err, "no leader yet")
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs, err := e1.Observe(octx, &v3electionpb.LeaderRequest{Name: []byte("grp")})
	require.NoError(t, err)

	cr, err := e0.Campaign(ctx, &v3electionpb.CampaignRequest{Name: []byte("grp"), Lease: int64(g0.ID), Value: []byte("one")})
	require.NoError(t, err)
	lr, err := e1.Leader(ctx, &v3electionpb.LeaderRequest{Name: []byte("grp")})
	require.NoError(t, err)
	assert.Equal(t, "one", string(lr.Kv.Value))
	assert.Equal(t, cr.Leader.Key, lr.Kv.Key)
	o, err := obs.Recv()
	require.NoError(t, err)
	assert.Equal(t, "one", string(o.Kv.Value))

	// A Go candidate of the same group waits behind the etcd leader.
	s, err := f.c.Node(2).NewSession(ctx, coord.WithTTL(5*time.Second))
	require.NoError(t, err)
	defer s.Close(context.Background())
	won, _, err := coord.NewElection(s, "grp").TryCampaign(ctx, "go")
	require.NoError(t, err)
	assert.False(t, won)

	_, err = e0.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: cr.Leader, Value: []byte("two")})
	require.NoError(t, err)
	for {
		o, err = obs.Recv()
		require.NoError(t, err)
		if string(o.Kv.Value) == "two" {
			break
		}
	}
	_, err = e0.Resign(ctx, &v3electionpb.ResignRequest{Leader: cr.Leader})
	require.NoError(t, err)
	_, err = e0.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: cr.Leader, Value: []byte("three")})
	require.Error(t, err, "not leader after resigning")
}

// TestLockSweepDropsEndedHolds: the front keeps a lock's Mutex for its
// Unlock, but a hold unlocked through another front (or whose lease
// ended) never comes back to it: sweep drops every hold whose Mutex is
// done and keeps the live ones, so the map is bounded by live holds.
func TestLockSweepDropsEndedHolds(t *testing.T) {
	f := newFront(t, nil)
	ctx := tctx(t)
	s, err := f.c.Node(0).NewSession(ctx, coord.WithTTL(5*time.Second))
	require.NoError(t, err)
	defer s.Close(context.Background())
	live := coord.NewMutex(s, "live")
	_, err = live.Lock(ctx)
	require.NoError(t, err)
	ls := &lockServer{held: map[string]*coord.Mutex{live.Key(): live}}
	for i := range 3 * minSweep {
		m := coord.NewMutex(s, "gone")
		_, err := m.Lock(ctx)
		require.NoError(t, err)
		key := m.Key()
		require.NoError(t, m.Unlock(ctx)) // as another front's Unlock would end it
		ls.held[key+string(rune('a'+i%26))+fmt.Sprint(i)] = m
	}
	ls.mu.Lock()
	ls.sweep()
	ls.mu.Unlock()
	require.Equal(t, 1, ls.heldCount())
	require.Contains(t, ls.held, live.Key())
	require.Equal(t, minSweep, ls.sweepAt)
}
