package coord_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// withCache makes a client cache the prefixes.
func withCache(prefixes ...string) func(*coord.ClientConfig) {
	return func(cfg *coord.ClientConfig) { cfg.Cache = prefixes }
}

// waitCache waits until the client's cache of prefix is current to rev.
func waitCache(t *testing.T, cl *coord.Client, prefix string, rev int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := cl.CacheRevision(prefix)
		if err == nil && got >= rev {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache of %q never reached revision %d: at %d, %v", prefix, rev, got, err)
		}
		time.Sleep(5 * time.Millisecond) // the cache's revision moves without an event to wait on
	}
}

// cacheModel is the history of a prefix as its only writer made it: the
// state at every revision, to check what cached reads returned.
type cacheModel struct {
	mu      sync.Mutex
	changes []modelChange // in revision order
}

type modelChange struct {
	rev  int64
	sets map[string]string
	dels []string
}

func (m *cacheModel) record(rev int64, sets map[string]string, dels ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changes = append(m.changes, modelChange{rev: rev, sets: sets, dels: dels})
}

// at returns the state at rev.
func (m *cacheModel) at(rev int64) map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	state := map[string]string{}
	for _, ch := range m.changes {
		if ch.rev > rev {
			break
		}
		maps.Copy(state, ch.sets)
		for _, k := range ch.dels {
			delete(state, k)
		}
	}
	return state
}

func (m *cacheModel) last() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.changes) == 0 {
		return 0
	}
	return m.changes[len(m.changes)-1].rev
}

// snapshot is what one cached List returned.
type snapshot struct {
	rev   int64
	state map[string]string
}

func asState(kvs []coord.KV) map[string]string {
	s := map[string]string{}
	for _, kv := range kvs {
		s[kv.Key] = string(kv.Value)
	}
	return s
}

// readSnapshots lists prefix serializably until ctx ends, checks that
// each listing is in key order and no older than the one before, and
// returns the first listing at each revision.
func readSnapshots(ctx context.Context, t *testing.T, cl *coord.Client, prefix string) []snapshot {
	var out []snapshot
	var prev int64
	for ctx.Err() == nil {
		kvs, rev, err := cl.List(ctx, prefix, coord.Serializable())
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			continue // between members: the member's read failed
		}
		if rev < prev {
			t.Errorf("cached List went back from revision %d to %d", prev, rev)
		}
		if !sort.SliceIsSorted(kvs, func(i, j int) bool { return kvs[i].Key < kvs[j].Key }) {
			t.Errorf("List at %d not in key order: %v", rev, kvs)
		}
		if len(out) == 0 || rev != prev {
			out = append(out, snapshot{rev: rev, state: asState(kvs)}) // one per revision seen
		}
		prev = rev
	}
	return out
}

// checkSnapshots checks every listing against the writer's history: the
// state at the listing's revision, no more and no less.
func checkSnapshots(t *testing.T, m *cacheModel, snaps []snapshot) {
	t.Helper()
	for _, s := range snaps {
		if want := m.at(s.rev); !maps.Equal(s.state, want) {
			var near []modelChange
			for _, ch := range m.changes {
				if ch.rev > s.rev-5 && ch.rev < s.rev+5 {
					near = append(near, ch)
				}
			}
			t.Fatalf("List at revision %d returned %v, the cell had %v; changes near it: %+v", s.rev, s.state, want, near)
		}
	}
}

// writeRandom makes n random changes under prefix (puts, deletes,
// transactions of both) and a write outside it now and then, through w,
// and records them in m.
func writeRandom(ctx context.Context, t *testing.T, w coord.Cell, m *cacheModel, rng *rand.Rand, prefix string, n int) {
	t.Helper()
	state := m.at(m.last())
	for i := range n {
		key := fmt.Sprintf("%s%d", prefix, rng.IntN(10))
		val := strconv.Itoa(i)
		switch r := rng.IntN(10); {
		case r < 5:
			kv, err := w.Put(ctx, key, []byte(val))
			require.NoError(t, err)
			m.record(kv.ModRev, map[string]string{key: val})
			state[key] = val
		case r < 7:
			rev, err := w.Delete(ctx, key)
			require.NoError(t, err)
			if _, ok := state[key]; ok {
				m.record(rev, nil, key)
				delete(state, key)
			}
		case r < 9:
			// Another key: a branch may not both put and delete one.
			other := fmt.Sprintf("%s%d", prefix, rng.IntN(10))
			if other == key {
				other = prefix + "10"
			}
			res, err := w.Txn(ctx).Then(coord.OpPut(key, []byte(val)), coord.OpDelete(other)).Commit()
			require.NoError(t, err)
			m.record(res.Rev, map[string]string{key: val}, other)
			state[key] = val
			delete(state, other)
		default:
			_, err := w.Put(ctx, "outside/"+val, []byte(val))
			require.NoError(t, err)
		}
	}
}

// A cache sees the writes made elsewhere, a revision at a time and in
// order: every cached List is the cell's state at the revision it names.
func TestClientCacheSeesWritesInOrder(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c, withCache("c/"))
	ctx := ctxT(t, 60*time.Second)
	waitCache(t, cl, "c/", 0)

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	var m cacheModel
	rctx, stop := context.WithCancel(ctx)
	snaps := make(chan []snapshot, 1)
	go func() { snaps <- readSnapshots(rctx, t, cl, "c/") }()
	writeRandom(ctx, t, c.Node(1), &m, rng, "c/", 300)
	waitCache(t, cl, "c/", m.last())
	stop()
	got := <-snaps
	checkSnapshots(t, &m, got)
	kvs, rev, err := cl.List(ctx, "c/", coord.Serializable())
	require.NoError(t, err)
	require.Equal(t, m.at(rev), asState(kvs))
	require.Equal(t, m.at(m.last()), asState(kvs), "the cache converged on the cell")
	t.Logf("cached listings at %d revisions checked, %d reads answered by the cache", len(got), coord.ClientCacheHits(cl, "c/"))
	require.Positive(t, coord.ClientCacheHits(cl, "c/"))
	require.EqualValues(t, 1, coord.ClientCacheLists(cl, "c/"), "one listing, then the watch")
}

// A serializable read after a write through the same client sees the
// write (the read waits for the cache to reach it).
func TestClientCacheReadYourWrites(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c, withCache("ryw/"))
	ctx := ctxT(t, 60*time.Second)
	waitCache(t, cl, "ryw/", 0)

	for i := range 40 {
		val := []byte(strconv.Itoa(i))
		kv, err := cl.Put(ctx, "ryw/k", val)
		require.NoError(t, err)
		got, err := cl.Get(ctx, "ryw/k", coord.Serializable())
		require.NoError(t, err)
		require.Equal(t, string(val), string(got.Value), "read after put %d", i)
		kvs, rev, err := cl.List(ctx, "ryw/", coord.Serializable())
		require.NoError(t, err)
		require.GreaterOrEqual(t, rev, kv.ModRev)
		require.Equal(t, map[string]string{"ryw/k": string(val)}, asState(kvs))
		if i%8 == 7 {
			_, err := cl.Delete(ctx, "ryw/k")
			require.NoError(t, err)
			_, err = cl.Get(ctx, "ryw/k", coord.Serializable())
			require.ErrorIs(t, err, coord.ErrNotFound, "read after delete %d", i)
		}
	}
	// A transaction, and the end of a session deleting its keys.
	_, err := cl.Txn(ctx).Then(coord.OpPut("ryw/t", []byte("t"))).Commit()
	require.NoError(t, err)
	got, err := cl.Get(ctx, "ryw/t", coord.Serializable())
	require.NoError(t, err)
	require.Equal(t, "t", string(got.Value))
	s, err := cl.NewSession(ctx)
	require.NoError(t, err)
	_, err = cl.Put(ctx, "ryw/eph", []byte("e"), coord.Ephemeral(s))
	require.NoError(t, err)
	_, err = cl.Get(ctx, "ryw/eph", coord.Serializable())
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	_, err = cl.Get(ctx, "ryw/eph", coord.Serializable())
	require.ErrorIs(t, err, coord.ErrNotFound, "read after the session's end")

	// Answered by the cache (a read that waited in vain on a loaded
	// machine went to the member, with the same answer).
	t.Logf("%d reads answered by the cache", coord.ClientCacheHits(cl, "ryw/"))
	require.Positive(t, coord.ClientCacheHits(cl, "ryw/"))
	// The returned bytes are the caller's: changing them changes no
	// later read.
	got.Value[0] = 'X'
	again, err := cl.Get(ctx, "ryw/t", coord.Serializable())
	require.NoError(t, err)
	require.Equal(t, "t", string(again.Value))
}

// Linearizable reads go to the member; so do reads outside the cache.
func TestClientCacheLinearizableReadsGoToMember(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c, withCache("lin/"))
	ctx := ctxT(t, 30*time.Second)
	kv, err := c.Node(0).Put(ctx, "lin/a", []byte("1"))
	require.NoError(t, err)
	waitCache(t, cl, "lin/", kv.ModRev)
	hits := coord.ClientCacheHits(cl, "lin/")
	_, err = cl.Get(ctx, "lin/a")
	require.NoError(t, err)
	_, _, err = cl.List(ctx, "lin/")
	require.NoError(t, err)
	_, err = cl.Get(ctx, "other", coord.Serializable())
	require.ErrorIs(t, err, coord.ErrNotFound)
	require.Equal(t, hits, coord.ClientCacheHits(cl, "lin/"))
	_, err = cl.Get(ctx, "lin/a", coord.Serializable())
	require.NoError(t, err)
	require.Equal(t, hits+1, coord.ClientCacheHits(cl, "lin/"))

	_, err = cl.CacheRevision("other/")
	require.ErrorIs(t, err, coord.ErrInvalidArgument)
	rev, err := cl.CacheRevision("lin/sub/") // under the cached prefix
	require.NoError(t, err)
	require.GreaterOrEqual(t, rev, kv.ModRev)
}

// appliedEverywhere returns once each member has applied every
// write made so far (a linearizable read waits for that), so a
// serializable read on any of them sees them.
func appliedEverywhere(ctx context.Context, t *testing.T, c *coordtest.Cluster) {
	t.Helper()
	for i := range c.Size() {
		_, err := c.Node(i).Get(ctx, "any")
		require.ErrorIs(t, err, coord.ErrNotFound)
	}
}

// A client that has just connected answers from the member until its
// cache has listed: never from an empty cache.
func TestClientCacheNeverAnswersBeforeListing(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	ctx := ctxT(t, 60*time.Second)
	for i := range 5 {
		_, err := c.Node(0).Put(ctx, fmt.Sprintf("e/%d", i), []byte("v"))
		require.NoError(t, err)
	}
	for range 5 {
		// The last round's delete of e/zz is applied on the member the
		// new client lands on, so its serializable answers see 5 keys.
		appliedEverywhere(ctx, t, c)
		cl := connect(t, c, withCache("e/"))
		_, err := cl.Get(ctx, "e/3", coord.Serializable())
		require.NoError(t, err)
		kvs, _, err := cl.List(ctx, "e/", coord.Serializable())
		require.NoError(t, err)
		require.Len(t, kvs, 5)
		// The cache goes on following changes after its first answers.
		_, err = c.Node(0).Put(ctx, "e/zz", nil)
		require.NoError(t, err)
		rev, err := c.Node(0).Delete(ctx, "e/zz")
		require.NoError(t, err)
		waitCache(t, cl, "e/", rev)
		require.NoError(t, cl.Close())
	}
}

// When the client is cut from its member and moves to another, the
// cache resumes from its last revision: no listing again, no gap, no
// repeat, and every cached List on the way is the cell's state at its
// revision.
func TestClientCacheFailover(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c, withCache("f/"))
	ctx := ctxT(t, 90*time.Second)
	waitCache(t, cl, "f/", 0)

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	var m cacheModel
	rctx, stop := context.WithCancel(ctx)
	snaps := make(chan []snapshot, 1)
	go func() { snaps <- readSnapshots(rctx, t, cl, "f/") }()
	w := c.Node(rng.IntN(3))
	writeRandom(ctx, t, w, &m, rng, "f/", 100)
	before := cl.Member()
	c.CutClient(cl)
	writeRandom(ctx, t, w, &m, rng, "f/", 100)
	// The client has moved once a write through it succeeds.
	for {
		if _, err := cl.Put(ctx, "outside/moved", []byte("1")); err == nil {
			break
		}
		require.NoError(t, ctx.Err(), "the client never moved")
	}
	writeRandom(ctx, t, w, &m, rng, "f/", 100)
	waitCache(t, cl, "f/", m.last())
	stop()
	got := <-snaps
	t.Logf("cut from %s, now on %s; cached listings at %d revisions checked, the last at %d of %d",
		before, cl.Member(), len(got), got[len(got)-1].rev, m.last())
	checkSnapshots(t, &m, got)
	kvs, _, err := cl.List(ctx, "f/", coord.Serializable())
	require.NoError(t, err)
	require.Equal(t, m.at(m.last()), asState(kvs))
	require.EqualValues(t, 1, coord.ClientCacheLists(cl, "f/"), "resumed from its revision, not listed again")
}

// A client cut off while the prefix changes far past the members'
// history comes back to a compacted revision: the cache lists again and
// converges on the cell.
func TestClientCacheRelistsOnCompaction(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var blocked atomic.Bool
		c := coordtest.NewCluster(t, 3, coordtest.WithClients(), coordtest.WithConfig(func(i int, cfg *coord.Config) {
			cfg.HistoryRevisions = 20
		}))
		c.Leader()
		cl := connect(t, c, withCache("m/"), func(cfg *coord.ClientConfig) {
			dial := cfg.Dial
			cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
				if blocked.Load() {
					return nil, errors.New("test: cut off")
				}
				return dial(ctx, addr)
			}
		})
		ctx := ctxT(t, 120*time.Second)
		kv, err := c.Node(0).Put(ctx, "m/start", []byte("s"))
		require.NoError(t, err)
		waitCache(t, cl, "m/", kv.ModRev)

		blocked.Store(true)
		c.CutClient(cl)
		// More than twice the member's in-memory window of events per
		// prefix (4,096), so the resume needs revisions nobody keeps.
		want := map[string]string{"m/start": "s"}
		var last int64
		for made := 0; made < 2*4096+256; {
			var ops []coord.Op
			for k := range 100 {
				key, val := fmt.Sprintf("m/%d", k), strconv.Itoa(made)
				ops = append(ops, coord.OpPut(key, []byte(val)))
				want[key] = val
				made++
			}
			res, err := c.Node(1).Txn(ctx).Then(ops...).Commit()
			require.NoError(t, err)
			last = res.Rev
		}
		// Cut off, the cache still answers, from the revision it had.
		kvs, rev, err := cl.List(ctx, "m/", coord.Serializable())
		require.NoError(t, err)
		require.Less(t, rev, last)
		require.Equal(t, map[string]string{"m/start": "s"}, asState(kvs))
		blocked.Store(false)

		waitCache(t, cl, "m/", last)
		kvs, _, err = cl.List(ctx, "m/", coord.Serializable())
		require.NoError(t, err)
		require.Equal(t, want, asState(kvs))
		require.GreaterOrEqual(t, coord.ClientCacheLists(cl, "m/"), int64(2), "listed again after the compaction")
	})
}

// Readers share the cache with its feed under -race: each sees every
// key's values only move forward, and every listing's revision too.
func TestClientCacheConcurrentReaders(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c, withCache("r/"))
	ctx := ctxT(t, 60*time.Second)
	waitCache(t, cl, "r/", 0)

	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for r := range 6 {
		wg.Go(func() {
			seen := map[string]int{}
			var prevRev int64
			for rctx.Err() == nil {
				key := fmt.Sprintf("r/%d", r%3)
				if kv, err := cl.Get(rctx, key, coord.Serializable()); err == nil {
					n, _ := strconv.Atoi(string(kv.Value))
					if n < seen[key] {
						t.Errorf("reader %d: %s went back from %d to %d", r, key, seen[key], n)
					}
					seen[key] = n
				}
				if kvs, rev, err := cl.List(rctx, "r/", coord.Serializable()); err == nil {
					if rev < prevRev {
						t.Errorf("reader %d: List went back from revision %d to %d", r, prevRev, rev)
					}
					prevRev = rev
					for _, kv := range kvs {
						n, _ := strconv.Atoi(string(kv.Value))
						if n < seen[kv.Key] {
							t.Errorf("reader %d: %s went back from %d to %d", r, kv.Key, seen[kv.Key], n)
						}
						seen[kv.Key] = n
					}
				}
			}
		})
	}
	var last int64
	for i := 1; i <= 150; i++ {
		kv, err := c.Node(i%3).Put(ctx, fmt.Sprintf("r/%d", i%3), []byte(strconv.Itoa(i)))
		require.NoError(t, err)
		last = kv.ModRev
	}
	waitCache(t, cl, "r/", last)
	stop()
	wg.Wait()
	kvs, _, err := cl.List(ctx, "r/", coord.Serializable())
	require.NoError(t, err)
	require.Equal(t, map[string]string{"r/0": "150", "r/1": "148", "r/2": "149"}, asState(kvs))
}

// A prefix that outgrows CacheMaxBytes is dropped: CacheRevision says
// so, reads go to the member (and are right), and once the prefix fits
// again the cache lists it and answers again.
func TestClientCacheByteBound(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c, withCache("b/"), func(cfg *coord.ClientConfig) { cfg.CacheMaxBytes = 2000 })
	ctx := ctxT(t, 60*time.Second)
	waitCache(t, cl, "b/", 0)

	val := make([]byte, 100)
	for i := range 20 {
		_, err := c.Node(0).Put(ctx, fmt.Sprintf("b/%02d", i), val)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		_, err := cl.CacheRevision("b/")
		return errors.Is(err, coord.ErrQuotaExceeded)
	}, 30*time.Second, 5*time.Millisecond, "the cache never gave up")
	_, err := cl.CacheRevision("b/")
	t.Logf("over the bound: %v", err)
	appliedEverywhere(ctx, t, c)
	kvs, _, err := cl.List(ctx, "b/", coord.Serializable())
	require.NoError(t, err)
	require.Len(t, kvs, 20, "the member answers while the cache is over its bound")

	var last int64
	for i := 2; i < 20; i++ {
		last, err = c.Node(0).Delete(ctx, fmt.Sprintf("b/%02d", i))
		require.NoError(t, err)
	}
	waitCache(t, cl, "b/", last)
	hits := coord.ClientCacheHits(cl, "b/")
	kvs, _, err = cl.List(ctx, "b/", coord.Serializable())
	require.NoError(t, err)
	require.Len(t, kvs, 2)
	require.Equal(t, hits+1, coord.ClientCacheHits(cl, "b/"), "answered by the cache again")
}

func TestClientCacheConfig(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 1)
	c.Leader()
	ctx := ctxT(t, 10*time.Second)
	_, err := c.Connect(ctx, withCache("x/"), func(cfg *coord.ClientConfig) { cfg.CacheMaxBytes = -1 })
	require.ErrorIs(t, err, coord.ErrInvalidConfig)
	// Nested prefixes share the outer cache.
	cl := connect(t, c, withCache("n/a/", "n/"))
	kv, err := c.Node(0).Put(ctx, "n/a/x", nil)
	require.NoError(t, err)
	waitCache(t, cl, "n/a/", kv.ModRev) // by the outer cache's watch
	require.EqualValues(t, 1, coord.ClientUpstreams(cl))
}

// BenchmarkClientCachedGet compares a serializable Get answered by the
// client's cache with one answered by its member.
func BenchmarkClientCachedGet(b *testing.B) {
	c := coordtest.NewCluster(b, 3, coordtest.WithClients())
	c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kv, err := c.Node(0).Put(ctx, "bench/k", make([]byte, 100))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		cache []string
	}{{"cached", []string{"bench/"}}, {"member", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			cl, err := c.Connect(ctx, withCache(bc.cache...))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			if bc.cache != nil {
				for rev, err := cl.CacheRevision("bench/"); err != nil || rev < kv.ModRev; rev, err = cl.CacheRevision("bench/") {
					time.Sleep(time.Millisecond)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cl.Get(ctx, "bench/k", coord.Serializable()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
