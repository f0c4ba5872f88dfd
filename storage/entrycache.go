package storage

import pb "go.etcd.io/raft/v3/raftpb"

// entryCache holds the most recent entries of the log, up to limit bytes
// of their encoded size. It is always a suffix of the log: its entries
// are contiguous and, when it is not empty, the last one is the log's
// last entry. That keeps lookups to arithmetic, and everything older than
// the cache is in Pebble.
type entryCache struct {
	limit int
	ents  []cachedEntry
	bytes int
}

type cachedEntry struct {
	e    *pb.Entry
	size int // proto.Size(e), known from marshalling it
}

// firstIndex is the index of the oldest cached entry, or last+1 if the
// cache is empty.
func (c *entryCache) firstIndex(last uint64) uint64 {
	return last + 1 - uint64(len(c.ents))
}

// get returns the cached entry i, or nil. last is the log's last index.
func (c *entryCache) get(i, last uint64) *pb.Entry {
	first := c.firstIndex(last)
	if i < first || i > last {
		return nil
	}
	return c.ents[i-first].e
}

// collect appends to out the cached entries from lo (which must be
// cached) up to hi, stopping before the one that would take the total size
// (size so far + theirs) past maxSize, but adding at least one entry to
// an empty out. The result is freshly allocated when out is nil.
func (c *entryCache) collect(out []*pb.Entry, lo, hi, size, maxSize uint64) []*pb.Entry {
	first := c.ents[0].e.GetIndex()
	window := c.ents[lo-first : hi-first]
	n := 0
	for _, ce := range window {
		sz := uint64(ce.size)
		if (len(out) > 0 || n > 0) && size+sz > maxSize {
			break
		}
		size += sz
		n++
	}
	if out == nil {
		out = make([]*pb.Entry, 0, n)
	}
	for _, ce := range window[:n] {
		out = append(out, ce.e)
	}
	return out
}

// append adds ents (with their encoded sizes), which start at most at
// prevLast+1, dropping any cached entries they replace, then evicts the
// oldest entries beyond the limit.
func (c *entryCache) append(ents []*pb.Entry, sizes []int, prevLast uint64) {
	start := ents[0].GetIndex()
	if first := c.firstIndex(prevLast); start <= first {
		c.reset()
	} else if start <= prevLast {
		keep := int(start - first)
		for _, ce := range c.ents[keep:] {
			c.bytes -= ce.size
		}
		clear(c.ents[keep:]) // release the replaced entries
		c.ents = c.ents[:keep]
	}
	// Entries bigger than the whole cache would be evicted at once.
	skip := 0
	for total, i := 0, len(ents)-1; i >= 0; i-- {
		total += sizes[i]
		if total > c.limit {
			skip = i + 1
			break
		}
	}
	if skip > 0 {
		// Keeping older cached entries would break contiguity.
		c.reset()
	}
	for i := skip; i < len(ents); i++ {
		c.ents = append(c.ents, cachedEntry{e: ents[i], size: sizes[i]})
		c.bytes += sizes[i]
	}
	c.evict()
}

// evict drops the oldest entries until the cache fits its limit.
func (c *entryCache) evict() {
	n := 0
	for c.bytes > c.limit && n < len(c.ents) {
		c.bytes -= c.ents[n].size
		n++
	}
	if n == 0 {
		return
	}
	clear(c.ents[:n]) // the backing array must not pin evicted entries
	c.ents = c.ents[n:]
}

// dropThrough drops the cached entries with index <= i (compaction).
func (c *entryCache) dropThrough(i uint64) {
	n := 0
	for n < len(c.ents) && c.ents[n].e.GetIndex() <= i {
		c.bytes -= c.ents[n].size
		n++
	}
	clear(c.ents[:n])
	c.ents = c.ents[n:]
}

func (c *entryCache) reset() {
	clear(c.ents)
	c.ents = c.ents[:0]
	c.bytes = 0
}
