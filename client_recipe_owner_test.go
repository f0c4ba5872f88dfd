package coord_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/stretchr/testify/require"
)

// recipeGrants gives alice and bob the recipes' prefixes, and ops the
// same prefixes as an admin.
func recipeGrants(identity string) (coord.ClientGrant, error) {
	prefixes := []string{"locks/", "elections/", "app/"}
	switch identity {
	case "alice", "bob":
		return coord.ClientGrant{WritePrefixes: prefixes}, nil
	case "ops":
		return coord.ClientGrant{WritePrefixes: prefixes, Admin: true}, nil
	}
	return coord.ClientGrant{}, fmt.Errorf("no grant for %q", identity)
}

func connectAs(t *testing.T, ctx context.Context, addrs []string, name string) *coord.Client {
	t.Helper()
	cl, err := coord.Connect(ctx, coord.ClientConfig{Name: name, Members: addrs})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestClientCannotBreakAnotherSessionsLock: a grant on locks/ lets a
// client queue for every lock, not take one from its holder. Every way
// of deleting or overwriting another session's lock or election key is
// refused with ErrForbidden and changes nothing: the holder keeps its
// hold and its token. The client's own recipes work as before, and an
// admin grant may break a hold.
func TestClientCannotBreakAnotherSessionsLock(t *testing.T) {
	t.Parallel()
	c := serveCluster(t, 3, func(_ int, cfg *coord.Config) { cfg.ClientPolicy = recipeGrants })
	ctx := ctxT(t, 60*time.Second)
	addrs := clientAddrs(c)
	bob, alice, ops := connectAs(t, ctx, addrs, "bob"), connectAs(t, ctx, addrs, "alice"), connectAs(t, ctx, addrs, "ops")

	bs, err := bob.NewSession(ctx)
	require.NoError(t, err)
	bm := coord.NewMutex(bs, "jobs")
	tok, err := bm.Lock(ctx)
	require.NoError(t, err)
	lockKey := bm.Key()
	be := coord.NewElection(bs, "sched")
	_, err = be.Campaign(ctx, "bob")
	require.NoError(t, err)
	electionKey := be.Key()
	// A plain key of bob's session, outside the recipes: the cell keeps
	// ephemeral keys to their session's owner too.
	_, err = bob.Put(ctx, "app/bob", []byte("here"), coord.Ephemeral(bs))
	require.NoError(t, err)

	as, err := alice.NewSession(ctx)
	require.NoError(t, err)
	marker := "locks/jobs/d" + strings.Repeat("0", 16) + strings.Repeat("1", 16)
	// A linearizable read first: member 0 has then applied every write
	// above, so its revision is the cell's (seed 2305206945886823019 read
	// it one write behind).
	_, err = c.Node(0).Get(ctx, "app/bob")
	require.NoError(t, err)
	rev := c.Node(0).Status().Revision
	attacks := map[string]func() error{
		"delete the lock key": func() error { _, err := alice.Delete(ctx, lockKey); return err },
		"overwrite it":        func() error { _, err := alice.Put(ctx, lockKey, []byte("mine")); return err },
		"overwrite it with her session": func() error {
			_, err := alice.Put(ctx, lockKey, nil, coord.Ephemeral(as))
			return err
		},
		"delete it as a guarded release": func() error {
			_, err := alice.Txn(ctx).If(coord.CreateRev(lockKey).Eq(int64(tok))).Then(coord.OpDelete(lockKey)).Commit()
			return err
		},
		"delete the lock's queue":  func() error { _, err := alice.Txn(ctx).Then(coord.OpDeletePrefix("locks/jobs/")).Commit(); return err },
		"delete every lock":        func() error { _, err := alice.Txn(ctx).Then(coord.OpDeletePrefix("locks/")).Commit(); return err },
		"put a lock-delay marker":  func() error { _, err := alice.Put(ctx, marker, []byte("lock-delay:60000000000")); return err },
		"resign bob's candidacy":   func() error { _, err := alice.Delete(ctx, electionKey); return err },
		"proclaim in bob's name":   func() error { _, err := alice.Put(ctx, electionKey, []byte("alice")); return err },
		"delete the election":      func() error { _, err := alice.Txn(ctx).Then(coord.OpDeletePrefix("elections/")).Commit(); return err },
		"overwrite bob's app key":  func() error { _, err := alice.Put(ctx, "app/bob", []byte("gone")); return err },
		"delete bob's app key":     func() error { _, err := alice.Delete(ctx, "app/bob"); return err },
		"delete every app key":     func() error { _, err := alice.Txn(ctx).Then(coord.OpDeletePrefix("app/")).Commit(); return err },
		"queue with bob's session": func() error { _, err := alice.Put(ctx, lockKey[:len(lockKey)-1]+"f", nil); return err },
	}
	for name, attack := range attacks {
		err := attack()
		require.ErrorIs(t, err, coord.ErrForbidden, "alice could %s: %v", name, err)
	}
	_, err = c.Node(0).Get(ctx, "app/bob") // and every write before it applied
	require.NoError(t, err)
	require.Equal(t, rev, c.Node(0).Status().Revision, "a refused write changes nothing")

	kv, err := bob.Get(ctx, lockKey)
	require.NoError(t, err)
	require.Equal(t, int64(tok), kv.CreateRev)
	require.Equal(t, bs.ID(), kv.Session)
	require.Equal(t, tok, bm.Token())
	leader, err := be.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "bob", string(leader.Value))
	select {
	case <-bm.Done():
		t.Fatal("bob's hold ended")
	case <-be.Done():
		t.Fatal("bob's leadership ended")
	default:
	}

	// alice's own recipes work: she queues behind bob, and holds a lock
	// of her own.
	am := coord.NewMutex(as, "jobs")
	_, err = am.TryLock(ctx)
	require.ErrorIs(t, err, coord.ErrLocked)
	own := coord.NewMutex(as, "reports")
	_, err = own.Lock(ctx)
	require.NoError(t, err)
	_, err = alice.Put(ctx, "app/alice", []byte("mine"), coord.Ephemeral(as))
	require.NoError(t, err)
	_, err = alice.Txn(ctx).Then(coord.OpDelete("app/alice")).Commit()
	require.NoError(t, err)
	require.NoError(t, own.Unlock(ctx))
	require.NoError(t, bm.Unlock(ctx))
	atok, err := am.Lock(ctx)
	require.NoError(t, err)
	require.Greater(t, atok, tok)

	// An admin may break a hold: ops ends alice's.
	_, err = ops.Delete(ctx, am.Key())
	require.NoError(t, err)
	select {
	case <-am.Done():
	case <-ctx.Done():
		t.Fatal("alice's hold did not end when ops deleted its key")
	}
	_, err = ops.Txn(ctx).Then(coord.OpDeletePrefix("elections/sched/")).Commit()
	require.NoError(t, err)
	select {
	case <-be.Done():
	case <-ctx.Done():
		t.Fatal("bob's leadership did not end when ops deleted the election")
	}
}
