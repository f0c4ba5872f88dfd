package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
)

// A client's cache (ClientConfig.Cache) keeps every key under a prefix in
// memory, fed by one ListWatch of the prefix: gap-free and resumed from
// its last revision when the client moves to another member (the merged
// upstream watch does that), listed again when the history it needs was
// compacted. Serializable reads under the prefix are answered from it
// without a round trip; linearizable reads still go to the member.
//
// The cache is a consistent snapshot of the prefix at one revision: a
// revision's changes are applied together, under one lock, so a reader
// never sees half a transaction or half a session's expiry.
//
// It never answers while it holds nothing it can vouch for: before its
// first listing, and after it gave up (over its byte bound, or its watch
// refused), reads go to the member.

// cacheEntryOverhead is what a cached key costs beyond its key and value
// bytes (map slot, KV struct, sorted-key slot), counted against the bound
// so that many small keys cannot slip past it.
const cacheEntryOverhead = 128

// cacheMaxBackoff bounds, in election timeouts, the wait before a cache
// that gave up lists again.
const cacheMaxBackoff = 64

// clientCache is the client's set of cached prefixes; nil when it caches
// none, and every method is then a miss.
type clientCache struct {
	c        *Client
	prefixes []*prefixCache
	maxBytes int64
}

// prefixCache is the cache of one prefix.
type prefixCache struct {
	cc     *clientCache
	prefix string

	// need is the highest revision of a write through this client that
	// changed the prefix: a read waits (briefly) for the cache to reach
	// it, so the client reads its own writes.
	need atomic.Int64
	// gaveUp is the highest need a read waited for in vain; later reads
	// for it go to the member at once rather than each wait again.
	gaveUp atomic.Int64
	// lists and hits count listings and cached answers, for tests.
	lists, hits atomic.Int64

	mu      sync.RWMutex
	live    bool // holds a listing and every change since; else reads go to the member
	err     error
	rev     int64 // every change up to rev is applied
	kvs     map[string]command.KV
	keys    []string // the keys of kvs, sorted
	size    int64
	pending []spi.Event   // the events of a revision not yet complete
	moved   chan struct{} // closed, and replaced, when rev moves
}

// errCacheOverflow ends a cache's feed when its prefix outgrows the bound.
var errCacheOverflow = errors.New("coord: cache over ClientConfig.CacheMaxBytes")

// newClientCache checks the prefixes and returns the cache, or nil when
// cfg caches nothing. Prefixes under another cached prefix are dropped:
// the outer cache answers for them.
func newClientCache(c *Client, cfg Config) (*clientCache, error) {
	if cfg.CacheMaxBytes < 0 {
		return nil, fmt.Errorf("%w: ClientConfig.CacheMaxBytes %d is negative", errs.InvalidConfig, cfg.CacheMaxBytes)
	}
	if len(cfg.Cache) == 0 {
		return nil, nil
	}
	cc := &clientCache{c: c, maxBytes: cfg.CacheMaxBytes}
	if cc.maxBytes == 0 {
		return nil, fmt.Errorf("%w: Config.CacheMaxBytes is zero (the root sets its default)", errs.InvalidConfig)
	}
	ps := slices.Clone(cfg.Cache)
	slices.Sort(ps) // an outer prefix sorts before every prefix under it
	for _, p := range ps {
		if len(cc.prefixes) > 0 && strings.HasPrefix(p, cc.prefixes[len(cc.prefixes)-1].prefix) {
			continue
		}
		cc.prefixes = append(cc.prefixes, &prefixCache{cc: cc, prefix: p, moved: make(chan struct{}),
			err: fmt.Errorf("%w: the cache of %q has not listed yet", errs.NotReady, p)})
	}
	return cc, nil
}

// start runs every prefix's feed until the client closes.
func (cc *clientCache) start() {
	if cc == nil {
		return
	}
	for _, p := range cc.prefixes {
		cc.c.wg.Go(p.feed)
	}
}

// covering returns the cache that holds every key under prefix, or nil.
func (cc *clientCache) covering(prefix string) *prefixCache {
	if cc == nil {
		return nil
	}
	for _, p := range cc.prefixes {
		if strings.HasPrefix(prefix, p.prefix) {
			return p
		}
	}
	return nil
}

// get answers a serializable Get from the cache; hit is false when the
// member must answer.
func (cc *clientCache) get(ctx context.Context, key string) (kv command.KV, ok, hit bool) {
	p := cc.covering(key)
	if p == nil {
		return command.KV{}, false, false
	}
	hit = p.answer(ctx, func() {
		kv, ok = p.kvs[key]
		kv = cloneKV(kv)
	})
	return kv, ok, hit
}

// list answers a serializable List (the page o asks for) from the cache,
// with the revision the cache is current to; hit is false when the
// member must answer.
func (cc *clientCache) list(ctx context.Context, prefix string, o spi.ReadOptions) (kvs []command.KV, rev int64, hit bool) {
	p := cc.covering(prefix)
	if p == nil {
		return nil, 0, false
	}
	start := prefix
	if o.After >= prefix {
		start = o.After + "\x00" // the least key after o.After
	}
	hit = p.answer(ctx, func() {
		i, _ := slices.BinarySearch(p.keys, start)
		kvs = []command.KV{}
		for ; i < len(p.keys) && strings.HasPrefix(p.keys[i], prefix) && (o.Limit == 0 || len(kvs) < o.Limit); i++ {
			kvs = append(kvs, cloneKV(p.kvs[p.keys[i]]))
		}
		rev = p.rev
	})
	return kvs, rev, hit
}

// answer runs read under p's read lock if p may answer now, or once it
// may (see current); it reports whether it ran read.
func (p *prefixCache) answer(ctx context.Context, read func()) bool {
	for waited := false; ; waited = true {
		p.mu.RLock()
		if p.live && p.rev >= p.need.Load() {
			p.hits.Add(1)
			read()
			p.mu.RUnlock()
			return true
		}
		p.mu.RUnlock()
		if waited || !p.current(ctx) {
			return false
		}
	}
}

// cloneKV gives the caller its own value bytes, as a member's read does:
// the cache's must not change under its other readers.
func cloneKV(kv command.KV) command.KV {
	if kv.Value != nil {
		kv.Value = bytes.Clone(kv.Value)
	}
	return kv
}

// current reports whether p may answer: it is live and has reached
// every write this client made under the prefix. It waits for that up to
// an election timeout (the write's event is normally a moment away); a
// read that waited in vain goes to the member, and so do the reads after
// it until the cache has caught up, without waiting again.
func (p *prefixCache) current(ctx context.Context) bool {
	need := p.need.Load()
	p.mu.RLock()
	live, rev, moved := p.live, p.rev, p.moved
	p.mu.RUnlock()
	if !live {
		return false
	}
	if rev >= need {
		return true
	}
	if p.gaveUp.Load() >= need {
		return false
	}
	t := time.NewTimer(p.cc.c.ElectionTimeout())
	defer t.Stop()
	for {
		select {
		case <-moved:
		case <-t.C:
			raiseTo(&p.gaveUp, need)
			return false
		case <-ctx.Done():
			return false // the member's read reports ctx's end
		}
		p.mu.RLock()
		live, rev, moved = p.live, p.rev, p.moved
		p.mu.RUnlock()
		if !live {
			return false
		}
		if rev >= need {
			return true
		}
	}
}

// raiseTo sets a to v unless it is already higher.
func raiseTo(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if old >= v || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// wrote notes a write the client's member applied, so later cached reads
// under a prefix it changed wait to see it.
func (cc *clientCache) wrote(cmd *command.Command, res command.Result) {
	if cc == nil {
		return
	}
	for _, p := range cc.prefixes {
		if changes(cmd, res, p.prefix) {
			raiseTo(&p.need, res.Rev)
		}
	}
}

// changes reports whether cmd, applied with res, may have changed a key
// under prefix. A session's end deletes keys the client cannot name, so
// it counts as a change everywhere.
func changes(cmd *command.Command, res command.Result, prefix string) bool {
	switch cmd.Kind {
	case command.KindSessionEnd:
		return true
	case command.KindTxn:
		if cmd.Txn == nil {
			return false
		}
	default:
		return false
	}
	if cmd.Txn.Nests() {
		// Whichever of its branches ran: a write under prefix may have.
		for op := range cmd.Txn.AllOps() {
			if op.Type != command.OpGet && (strings.HasPrefix(op.Key, prefix) || op.Prefix && strings.HasPrefix(prefix, op.Key)) {
				return true
			}
		}
		return false
	}
	ops := cmd.Txn.Then
	if !res.Succeeded {
		ops = cmd.Txn.Else
	}
	for i, op := range ops {
		switch op.Type {
		case command.OpPut:
			if strings.HasPrefix(op.Key, prefix) {
				return true
			}
		case command.OpDelete:
			if i < len(res.Ops) && res.Ops[i].Deleted == 0 {
				continue // deleted nothing: no event to wait for
			}
			if strings.HasPrefix(op.Key, prefix) || (op.Prefix && strings.HasPrefix(prefix, op.Key)) {
				return true
			}
		}
	}
	return false
}

// feed keeps p filled by ListWatch until the client closes. When the
// feed ends (over the bound, or the member refused the watch), p drops
// what it holds, reads go to the member, and it lists again after a
// wait that doubles each time up to cacheMaxBackoff election timeouts.
func (p *prefixCache) feed() {
	c := p.cc.c
	et := c.ElectionTimeout()
	wait := et
	for {
		o := spi.DefaultWatch()
		o.Progress = et / 2
		err := spi.ListWatch(c.life, c, p.prefix, p.onList, p.onEvent, o)
		if c.life.Err() != nil {
			p.stop(errs.Closed)
			return
		}
		if errors.Is(err, errCacheOverflow) {
			p.mu.RLock()
			err = p.err // onList or onEvent said by how much
			p.mu.RUnlock()
		}
		p.stop(err)
		c.log.Warn("cache stopped; reads under its prefix go to the member", "prefix", p.prefix,
			"retry_in", wait, "err", err)
		select {
		case <-time.After(wait):
		case <-c.life.Done():
			return
		}
		wait = min(2*wait, cacheMaxBackoff*et)
	}
}

// stop drops what p holds, with the reason reads go to the member.
func (p *prefixCache) stop(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live, p.err = false, fmt.Errorf("cache of %q: %w", p.prefix, err)
	p.kvs, p.keys, p.size, p.pending = nil, nil, 0, nil
	p.advance()
}

// advance wakes the readers waiting for rev to move; p.mu is held.
func (p *prefixCache) advance() {
	close(p.moved)
	p.moved = make(chan struct{})
}

// onList replaces what p holds with a listing at rev.
func (p *prefixCache) onList(kvs []command.KV, rev int64) error {
	m := make(map[string]command.KV, len(kvs))
	keys := make([]string, 0, len(kvs))
	var size int64
	for _, kv := range kvs {
		if !strings.HasPrefix(kv.Key, p.prefix) {
			continue // not asked for: a Get under the prefix never finds it, a List must not either
		}
		kv.Value = bytes.Clone(kv.Value)
		m[kv.Key] = kv
		keys = append(keys, kv.Key)
		size += entrySize(kv)
	}
	slices.Sort(keys) // List returns key order; the binary searches depend on it
	p.lists.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if size > p.cc.maxBytes {
		p.err = fmt.Errorf("%w: %d keys of %d bytes at revision %d, bound %d: %w", errs.QuotaExceeded,
			len(kvs), size, rev, p.cc.maxBytes, errCacheOverflow)
		return errCacheOverflow
	}
	p.kvs, p.keys, p.size, p.pending = m, keys, size, nil
	p.rev, p.live, p.err = rev, true, nil
	p.advance()
	return nil
}

// onEvent applies a revision's events together, at its last one.
func (p *prefixCache) onEvent(ev spi.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.Type == spi.EventProgress {
		if len(p.pending) == 0 && ev.Rev > p.rev {
			p.rev = ev.Rev
			p.advance()
		}
		return nil
	}
	if ev.Type == spi.EventPut {
		ev.KV.Value = bytes.Clone(ev.KV.Value) // the watch's bytes are shared with other watchers
	}
	p.pending = append(p.pending, ev)
	if !ev.EndOfRev {
		return nil
	}
	for _, e := range p.pending {
		p.apply(e)
	}
	p.pending = p.pending[:0]
	p.rev = ev.Rev
	p.advance()
	if p.size > p.cc.maxBytes {
		p.err = fmt.Errorf("%w: %d keys of %d bytes at revision %d, bound %d: %w", errs.QuotaExceeded,
			len(p.keys), p.size, p.rev, p.cc.maxBytes, errCacheOverflow)
		return errCacheOverflow
	}
	return nil
}

// apply applies one change; p.mu is held.
func (p *prefixCache) apply(e spi.Event) {
	key := e.KV.Key
	old, had := p.kvs[key]
	if had {
		p.size -= entrySize(old)
	}
	if e.Type == spi.EventDelete {
		if had {
			delete(p.kvs, key)
			if i, found := slices.BinarySearch(p.keys, key); found {
				p.keys = slices.Delete(p.keys, i, i+1)
			}
		}
		return
	}
	if !had {
		i, _ := slices.BinarySearch(p.keys, key)
		p.keys = slices.Insert(p.keys, i, key)
	}
	p.kvs[key] = e.KV
	p.size += entrySize(e.KV)
}

func entrySize(kv command.KV) int64 {
	return int64(len(kv.Key) + len(kv.Value) + cacheEntryOverhead)
}

// CacheRevision returns the revision the client's cache of prefix (a
// prefix in ClientConfig.Cache, or one under it) is current to: every
// change up to it is in the cache, so a Serializable() read made after
// this call reflects at least that revision. (A Serializable() List from
// the cache returns the exact revision it read at.) The cache trails the
// cell by the time a change takes to reach the client, and, while the
// client is between members, by as long as that lasts.
//
// It fails with errs.InvalidArgument when no cache covers prefix; with
// errs.NotReady before the cache's first listing; with errs.QuotaExceeded
// while the prefix is larger than ClientConfig.CacheMaxBytes (the cache
// lists again later, with growing waits, and serves once it fits). While
// it fails, Serializable() reads under prefix are answered by the member.
func (c *Client) CacheRevision(prefix string) (int64, error) {
	p := c.cache.covering(prefix)
	if p == nil {
		return 0, fmt.Errorf("%w: no cache holds %q (ClientConfig.Cache)", errs.InvalidArgument, prefix)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.live {
		return 0, p.err
	}
	return p.rev, nil
}
