package coord_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// nsCells runs f once through a member and once through a client of one
// cell, each with a prefix of its own ("node/" or "client/") that f's
// namespaces go under, so the two runs share the cell without meeting.
func nsCells(t *testing.T, f func(t *testing.T, ctx context.Context, c coord.Cell, root string)) {
	t.Helper()
	cl := coordtest.NewCluster(t, 3, coordtest.WithClients())
	cl.Leader()
	cells := []struct {
		name string
		cell coord.Cell
	}{{"node", cl.Node(0)}, {"client", connect(t, cl)}}
	for _, tc := range cells {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			f(t, ctx, tc.cell, tc.name+"/")
		})
	}
}

// nsKeys returns the keys of kvs, in order.
func nsKeys(kvs []coord.KV) []string {
	keys := make([]string, len(kvs))
	for i, kv := range kvs {
		keys[i] = kv.Key
	}
	return keys
}

func TestNamespaceKV(t *testing.T) {
	t.Parallel()
	nsCells(t, func(t *testing.T, ctx context.Context, c coord.Cell, root string) {
		ns := coord.Namespace(c, root+"app/")
		// Neighbours: a sibling whose key extends the prefix's text, and
		// another namespace.
		_, err := c.Put(ctx, root+"app", []byte("outside"))
		require.NoError(t, err)
		_, err = coord.Namespace(c, root+"other/").Put(ctx, "a", []byte("other"))
		require.NoError(t, err)

		kv, err := ns.Put(ctx, "a", []byte("1"), coord.IfVersion(0))
		require.NoError(t, err)
		require.Equal(t, "a", kv.Key)
		require.Equal(t, int64(1), kv.Version)
		_, err = ns.Put(ctx, "a", []byte("x"), coord.IfVersion(0))
		require.ErrorIs(t, err, coord.ErrConflict)
		_, err = ns.Put(ctx, "b/c", []byte("2"))
		require.NoError(t, err)

		got, err := ns.Get(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, "a", got.Key)
		require.Equal(t, []byte("1"), got.Value)
		got, err = c.Get(ctx, root+"app/a")
		require.NoError(t, err, "the key is stored under the prefix")
		require.Equal(t, []byte("1"), got.Value)

		kvs, rev, err := ns.List(ctx, "")
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b/c"}, nsKeys(kvs))
		require.GreaterOrEqual(t, rev, got.ModRev)
		kvs, _, err = ns.List(ctx, "b/", coord.Serializable())
		require.NoError(t, err)
		require.Equal(t, []string{"b/c"}, nsKeys(kvs))

		_, err = ns.Delete(ctx, "a", coord.IfVersion(5))
		require.ErrorIs(t, err, coord.ErrConflict)
		_, err = ns.Delete(ctx, "a")
		require.NoError(t, err)
		_, err = ns.Get(ctx, "a")
		require.ErrorIs(t, err, coord.ErrNotFound)

		// The neighbours are untouched.
		got, err = c.Get(ctx, root+"app")
		require.NoError(t, err)
		require.Equal(t, []byte("outside"), got.Value)
		kvs, _, err = c.List(ctx, root+"other/")
		require.NoError(t, err)
		require.Equal(t, []string{root + "other/a"}, nsKeys(kvs))

		// An empty key stays refused: it is not the namespace's prefix.
		_, err = ns.Put(ctx, "", []byte("v"))
		require.ErrorIs(t, err, coord.ErrInvalidKey)
		_, err = ns.Get(ctx, "")
		require.ErrorIs(t, err, coord.ErrInvalidKey)
		_, err = ns.Delete(ctx, "")
		require.ErrorIs(t, err, coord.ErrInvalidKey)
		_, err = c.Get(ctx, root+"app/")
		require.ErrorIs(t, err, coord.ErrNotFound)
	})
}

func TestNamespaceTxn(t *testing.T) {
	t.Parallel()
	nsCells(t, func(t *testing.T, ctx context.Context, c coord.Cell, root string) {
		ns := coord.Namespace(c, root+"app/")
		_, err := c.Put(ctx, "k", []byte("bare"))
		require.NoError(t, err)

		// The Cmp is on the namespace's k, which does not exist, not on
		// the bare k.
		res, err := ns.Txn(ctx).
			If(coord.Version("k").Eq(0), coord.Value("k").Eq(nil)).
			Then(coord.OpPut("k", []byte("v1")), coord.OpPut("j/1", []byte("j")), coord.OpGetPrefix("")).
			Else(coord.OpGet("k")).
			Commit()
		require.NoError(t, err)
		require.True(t, res.Succeeded)
		require.Equal(t, []string{"k"}, nsKeys(res.Results[0].KVs))
		require.Equal(t, []string{"j/1", "k"}, nsKeys(res.Results[2].KVs))

		res, err = ns.Txn(ctx).
			If(coord.ModRev("k").Lt(1)).
			Then(coord.OpDelete("k")).
			Else(coord.OpGet("k"), coord.OpGetPrefix("j/")).
			Commit()
		require.NoError(t, err)
		require.False(t, res.Succeeded)
		require.Equal(t, []string{"k"}, nsKeys(res.Results[0].KVs))
		require.Equal(t, []byte("v1"), res.Results[0].KVs[0].Value)
		require.Equal(t, []string{"j/1"}, nsKeys(res.Results[1].KVs))

		res, err = ns.Txn(ctx).Then(coord.OpDelete("k"), coord.OpDeletePrefix("")).Commit()
		require.NoError(t, err)
		require.Equal(t, int64(1), res.Results[0].Deleted)
		require.Equal(t, int64(1), res.Results[1].Deleted)
		got, err := c.Get(ctx, "k")
		require.NoError(t, err, "the bare key is outside the namespace")
		require.Equal(t, []byte("bare"), got.Value)

		// An empty key in an Op or a Cmp is refused; nothing is sent.
		for _, txn := range []*coord.Txn{
			ns.Txn(ctx).Then(coord.OpPut("", []byte("v"))),
			ns.Txn(ctx).Then(coord.OpDelete("")),
			ns.Txn(ctx).Else(coord.OpGet("")),
			ns.Txn(ctx).If(coord.Version("").Eq(0)).Then(coord.OpPut("x", nil)),
		} {
			_, err := txn.Commit()
			require.ErrorIs(t, err, coord.ErrInvalidKey)
		}
		kvs, _, err := c.List(ctx, root)
		require.NoError(t, err)
		require.Empty(t, kvs)
	})
}

// A user's delete of everything in a namespace leaves the locks and
// elections taken through it, and other namespaces, as they were.
func TestNamespaceDeletePrefixSparesRecipes(t *testing.T) {
	t.Parallel()
	nsCells(t, func(t *testing.T, ctx context.Context, c coord.Cell, root string) {
		ns := coord.Namespace(c, root+"app/")
		other := coord.Namespace(c, root+"other/")
		s, err := ns.NewSession(ctx, coord.WithTTL(2*time.Second))
		require.NoError(t, err)
		defer func() { _ = s.Close(context.WithoutCancel(ctx)) }()
		require.True(t, s.Cell() == ns, "the session's Cell is the namespace")

		m := coord.NewMutex(s, root+"db")
		token, err := m.Lock(ctx)
		require.NoError(t, err)
		e := coord.NewElection(s, root+"primary")
		_, err = e.Campaign(ctx, "me")
		require.NoError(t, err)
		lease, err := ns.Acquire(ctx, root+"lease", 2*time.Second)
		require.NoError(t, err)
		defer func() { _ = lease.Release(context.WithoutCancel(ctx)) }()
		_, err = ns.Put(ctx, "mine", []byte("v"))
		require.NoError(t, err)
		_, err = other.Put(ctx, "theirs", []byte("v"))
		require.NoError(t, err)

		recipeKeys := func() []string {
			var keys []string
			for _, p := range []string{"locks/" + root, "elections/" + root} {
				kvs, _, err := c.List(ctx, p)
				require.NoError(t, err)
				keys = append(keys, nsKeys(kvs)...)
			}
			return keys
		}
		before := recipeKeys()
		require.Len(t, before, 3, "the recipes' keys are where they always are: %v", before)
		kvs, _, err := ns.List(ctx, "")
		require.NoError(t, err)
		require.Equal(t, []string{"mine"}, nsKeys(kvs), "the namespace sees none of them")

		res, err := ns.Txn(ctx).Then(coord.OpDeletePrefix("")).Commit()
		require.NoError(t, err)
		require.Equal(t, int64(1), res.Results[0].Deleted)

		require.Equal(t, before, recipeKeys())
		res, err = c.Txn(ctx).If(m.IsOwner()).Commit()
		require.NoError(t, err)
		require.True(t, res.Succeeded, "the mutex is still held")
		require.NoError(t, ns.CheckToken(ctx, root+"db", token))
		require.NoError(t, ns.CheckToken(ctx, root+"lease", lease.Token))
		leader, err := coord.ElectionLeader(ctx, ns, root+"primary")
		require.NoError(t, err)
		require.Equal(t, "me", leader.Value)
		require.Equal(t, s.ID(), leader.Session)
		kvs, _, err = other.List(ctx, "")
		require.NoError(t, err)
		require.Equal(t, []string{"theirs"}, nsKeys(kvs))
	})
}

// A recipe's Cmp names the recipe's key inside a namespace's Txn.
func TestNamespaceTxnIsOwner(t *testing.T) {
	t.Parallel()
	nsCells(t, func(t *testing.T, ctx context.Context, c coord.Cell, root string) {
		ns := coord.Namespace(c, root+"app/")
		s, err := ns.NewSession(ctx, coord.WithTTL(2*time.Second))
		require.NoError(t, err)
		defer func() { _ = s.Close(context.WithoutCancel(ctx)) }()
		m := coord.NewMutex(s, root+"db")
		_, err = m.Lock(ctx)
		require.NoError(t, err)

		res, err := ns.Txn(ctx).If(m.IsOwner()).Then(coord.OpPut("guarded", []byte("1"))).Commit()
		require.NoError(t, err)
		require.True(t, res.Succeeded, "IsOwner holds for the holder inside a namespace")
		require.Equal(t, []string{"guarded"}, nsKeys(res.Results[0].KVs))

		require.NoError(t, m.Unlock(ctx))
		res, err = ns.Txn(ctx).If(m.IsOwner()).Then(coord.OpPut("guarded", []byte("2"))).Commit()
		require.NoError(t, err)
		require.False(t, res.Succeeded, "IsOwner fails once unlocked")
		got, err := ns.Get(ctx, "guarded")
		require.NoError(t, err)
		require.Equal(t, []byte("1"), got.Value)
	})
}

func TestNamespaceWatch(t *testing.T) {
	t.Parallel()
	nsCells(t, func(t *testing.T, ctx context.Context, c coord.Cell, root string) {
		ns := coord.Namespace(c, root+"app/")
		_, rev, err := ns.List(ctx, "")
		require.NoError(t, err)
		w := ns.Watch(ctx, "", coord.FromRev(rev), coord.WithPrevKV())
		defer w.Close()
		<-w.Ready()

		_, err = ns.Put(ctx, "a", []byte("1"))
		require.NoError(t, err)
		_, err = c.Put(ctx, root+"app", []byte("sibling")) // outside
		require.NoError(t, err)
		_, err = coord.Namespace(c, root+"other/").Put(ctx, "a", []byte("other"))
		require.NoError(t, err)
		_, err = ns.Put(ctx, "a", []byte("2"))
		require.NoError(t, err)
		_, err = ns.Put(ctx, "b", []byte("3"))
		require.NoError(t, err)
		// A put under a prefix delete of the same branch is refused (as
		// etcd does): the delete goes in its own transaction.
		_, err = ns.Txn(ctx).Then(coord.OpDeletePrefix("")).Commit()
		require.NoError(t, err)

		want := []string{"PUT a 1 <nil>", "PUT a 2 prev a=1", "PUT b 3 <nil>", "DELETE a  prev a=2", "DELETE b  prev b=3"}
		var got []string
		for len(got) < len(want) {
			select {
			case ev, ok := <-w.Events():
				require.True(t, ok, "watch ended: %v", w.Err())
				got = append(got, describe(ev))
			case <-ctx.Done():
				t.Fatalf("got %v of %v", got, want)
			}
		}
		require.Equal(t, want, got)
		require.Greater(t, w.LastRev(), rev)

		// A progress report passes through the relay.
		w.RequestProgress()
		select {
		case ev := <-w.Events():
			require.Equal(t, coord.EventProgress, ev.Type)
		case <-ctx.Done():
			t.Fatal("no progress report")
		}
		w.Close()
		for range w.Events() {
		}
		require.ErrorIs(t, w.Err(), context.Canceled)
	})
}

// describe is an event as "TYPE key value prev".
func describe(ev coord.Event) string {
	prev := "<nil>"
	if ev.PrevKV != nil {
		prev = fmt.Sprintf("prev %s=%s", ev.PrevKV.Key, ev.PrevKV.Value)
	}
	return fmt.Sprintf("%v %s %s %s", ev.Type, ev.KV.Key, ev.KV.Value, prev)
}

func TestNamespaceListWatch(t *testing.T) {
	t.Parallel()
	nsCells(t, func(t *testing.T, ctx context.Context, c coord.Cell, root string) {
		ns := coord.Namespace(c, root+"app/")
		_, err := ns.Put(ctx, "a", []byte("1"))
		require.NoError(t, err)
		_, err = c.Put(ctx, root+"other", []byte("x"))
		require.NoError(t, err)

		var listed, events []string
		done := errors.New("done")
		err = ns.ListWatch(ctx, "",
			func(kvs []coord.KV, rev int64) error {
				listed = nsKeys(kvs)
				// The change ListWatch must see next, and one it must not.
				if _, err := c.Put(ctx, root+"other", []byte("y")); err != nil {
					return err
				}
				_, err := ns.Put(ctx, "b", []byte("2"))
				return err
			},
			func(ev coord.Event) error {
				events = append(events, describe(ev))
				return done
			}, coord.WithPrevKV())
		require.ErrorIs(t, err, done)
		require.Equal(t, []string{"a"}, listed)
		require.Equal(t, []string{"PUT b 2 <nil>"}, events)
	})
}

// A namespace that would reach the recipes' keys, or is too long, is
// refused on every call, and changes nothing.
func TestNamespaceBadPrefix(t *testing.T) {
	t.Parallel()
	nsCells(t, func(t *testing.T, ctx context.Context, c coord.Cell, root string) {
		_, rev, err := c.List(ctx, "")
		require.NoError(t, err)
		bad := map[string]error{
			"":                           coord.ErrInvalidArgument,
			"l":                          coord.ErrInvalidArgument,
			"locks/":                     coord.ErrInvalidArgument,
			"locks/x/":                   coord.ErrInvalidArgument,
			"elections":                  coord.ErrInvalidArgument,
			"elections/g/":               coord.ErrInvalidArgument,
			strings.Repeat("p", 4<<10+1): coord.ErrKeyTooLarge,
		}
		for prefix, want := range bad {
			ns := coord.Namespace(c, prefix)
			_, err := ns.Put(ctx, "k", []byte("v"))
			require.ErrorIs(t, err, want, "prefix %.20q", prefix)
			_, err = ns.Delete(ctx, "k")
			require.ErrorIs(t, err, want)
			_, err = ns.Get(ctx, "k")
			require.ErrorIs(t, err, want)
			_, _, err = ns.List(ctx, "")
			require.ErrorIs(t, err, want)
			_, err = ns.Txn(ctx).Then(coord.OpDeletePrefix("")).Commit()
			require.ErrorIs(t, err, want)
			w := ns.Watch(ctx, "")
			for range w.Events() {
			}
			require.ErrorIs(t, w.Err(), want)
			err = ns.ListWatch(ctx, "", func([]coord.KV, int64) error { return nil },
				func(coord.Event) error { return nil })
			require.ErrorIs(t, err, want)
			if want == coord.ErrInvalidArgument {
				// The session calls use no key of the namespace: only
				// one reaching the recipes' keys is refused for them.
				_, err = ns.NewSession(ctx)
				require.ErrorIs(t, err, want)
				_, err = ns.Acquire(ctx, "x", 2*time.Second)
				require.ErrorIs(t, err, want)
				require.ErrorIs(t, ns.CheckToken(ctx, "x", 1), want)
			}
			// Nesting keeps the refusal.
			_, err = coord.Namespace(ns, "sub/").Put(ctx, "k", nil)
			require.ErrorIs(t, err, want)
		}
		// A bare ListWatch of a prefix over the limit ends at once (a
		// client learns the limit from its member's refusal).
		err = c.ListWatch(ctx, strings.Repeat("p", 4<<10+1), func([]coord.KV, int64) error { return nil },
			func(coord.Event) error { return nil })
		require.ErrorIs(t, err, coord.ErrKeyTooLarge)

		_, after, err := c.List(ctx, "")
		require.NoError(t, err)
		require.Equal(t, rev, after, "nothing changed")

		// The full key counts against the limit.
		ns := coord.Namespace(c, root+"app/")
		_, err = ns.Put(ctx, strings.Repeat("k", 4<<10-len(root+"app/")+1), nil)
		require.ErrorIs(t, err, coord.ErrKeyTooLarge)
		_, err = ns.Put(ctx, strings.Repeat("k", 4<<10-len(root+"app/")), nil)
		require.NoError(t, err)
	})
}

func TestNamespaceNested(t *testing.T) {
	t.Parallel()
	nsCells(t, func(t *testing.T, ctx context.Context, c coord.Cell, root string) {
		outer := coord.Namespace(c, root+"a/")
		inner := coord.Namespace(outer, "b/")
		kv, err := inner.Put(ctx, "k", []byte("v"))
		require.NoError(t, err)
		require.Equal(t, "k", kv.Key)
		kvs, _, err := outer.List(ctx, "")
		require.NoError(t, err)
		require.Equal(t, []string{"b/k"}, nsKeys(kvs))
		_, err = c.Get(ctx, root+"a/b/k")
		require.NoError(t, err)
		res, err := inner.Txn(ctx).If(coord.Version("k").Eq(1)).Then(coord.OpGetPrefix("")).Commit()
		require.NoError(t, err)
		require.True(t, res.Succeeded)
		require.Equal(t, []string{"k"}, nsKeys(res.Results[0].KVs))
		// An empty nested prefix is the parent namespace itself.
		_, err = coord.Namespace(outer, "").Get(ctx, "b/k")
		require.NoError(t, err)
	})
}
