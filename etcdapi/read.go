package etcdapi

// The read adapter: etcd's reads (a [key, range_end) range at a
// revision with its limit, count, sort and filters; a range or exact-key
// watch) as coord's own read and watch options, one bounded read each.
// Only a transaction's reads are still shaped here (coord's ops get one
// key or a prefix): nothing else in the package reads the cell.

import (
	"bytes"
	"context"
	"math"
	"slices"

	"github.com/coordcell/coord"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// keyRange is etcd's [key, end) as it comes in a request: end empty is
// the one key; end "\x00" is every key from key on.
type keyRange struct {
	key, end []byte
}

// single reports whether r names one key.
func (r keyRange) single() bool { return len(r.end) == 0 }

// all reports whether r reaches past every key (end "\x00").
func (r keyRange) all() bool { return len(r.end) == 1 && r.end[0] == 0 }

// contains reports whether k is in r.
func (r keyRange) contains(k string) bool {
	kb := []byte(k)
	if r.single() {
		return bytes.Equal(kb, r.key)
	}
	if bytes.Compare(kb, r.key) < 0 {
		return false
	}
	return r.all() || bytes.Compare(kb, r.end) < 0
}

// prefix is the longest prefix every key in r shares: what coord lists
// or watches to find them. A key between key and end agrees with both on
// their common prefix.
func (r keyRange) prefix() string {
	if r.single() {
		return string(r.key)
	}
	if r.all() {
		return ""
	}
	n := 0
	for n < len(r.key) && n < len(r.end) && r.key[n] == r.end[n] {
		n++
	}
	return string(r.key[:n])
}

// isPrefix reports whether r is exactly the keys under its key (etcd's
// WithPrefix form: end is key with its last byte incremented, or every
// key when key is empty or "\x00" and end is "\x00").
func (r keyRange) isPrefix() bool {
	if r.single() {
		return false
	}
	if r.all() {
		return len(r.key) == 0 || (len(r.key) == 1 && r.key[0] == 0)
	}
	return bytes.Equal(prefixEnd(r.key), r.end)
}

// asPrefix is the prefix an r in etcd's prefix form (isPrefix) names:
// its key, or every key ("") for the "\x00" forms. Not r.prefix(): "abc"
// to "abd" shares only "ab" with its end, and a delete of "ab" would reach
// keys outside r.
func (r keyRange) asPrefix() string {
	if r.all() {
		return ""
	}
	return string(r.key)
}

// prefixEnd is clientv3's GetPrefixRangeEnd: the first key after every
// key that starts with p.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// readRange is one etcd RangeRequest as one coord List: the range, its
// revision, limit, count, keys_only, count_only, sort and revision
// filters all given to coord, so the read is bounded by what it returns
// (and Config.MaxReadBytes) rather than by the prefix the keys share. It
// returns the keys, etcd's count (every key in the range, whatever the
// filters), more, and the current coord revision.
func readRange(ctx context.Context, c coord.Cell, r *pb.RangeRequest) (kvs []coord.KV, count int64, more bool, rev int64, err error) {
	kr := rangeOf(r.Key, r.RangeEnd)
	base := rangeBase(kr, r.Serializable, r.Revision)
	sort, err := sortOf(r)
	if err != nil {
		return nil, 0, false, 0, err
	}
	filters, none := filtersOf(r)
	opts := append(slices.Clip(base), filters...)
	if sort != nil {
		opts = append(opts, sort)
	}
	var matched int64
	opts = append(opts, coord.Counted(&matched))
	switch {
	case r.CountOnly:
		opts = append(opts, coord.CountOnly())
	case r.Limit > 0:
		opts = append(opts, coord.Limit(int(min(r.Limit, math.MaxInt32))))
	}
	if r.KeysOnly {
		opts = append(opts, coord.KeysOnly())
	}
	key := listKey(kr)
	switch {
	case r.Revision == 1:
		// etcd's revision 1 is the empty store (coord's 0, which WithRev
		// takes as now): no key, read only for the current revision.
		_, rev, err = c.List(ctx, key, append(slices.Clip(base), coord.KeysOnly(), coord.Limit(1))...)
		return nil, 0, false, rev, err
	case none:
		// A max revision of 1 keeps no key (coord's 0 would be no bound):
		// only the range's count.
		_, rev, err = c.List(ctx, key, append(slices.Clip(base), coord.CountOnly(), coord.Counted(&count))...)
		return nil, count, false, rev, err
	}
	kvs, rev, err = c.List(ctx, key, opts...)
	if err != nil {
		return nil, 0, false, 0, err
	}
	more = !r.CountOnly && matched > int64(len(kvs))
	count = matched
	if len(filters) > 0 {
		// etcd counts the range before its filters: a second, count-only
		// read of the same revision.
		at := rev
		if r.Revision > 0 {
			at = r.Revision - 1
		}
		copts := append(slices.Clip(base), coord.WithRev(at), coord.CountOnly(), coord.Counted(&count))
		if _, _, err := c.List(ctx, key, copts...); err != nil {
			return nil, 0, false, 0, err
		}
	}
	return kvs, count, more, rev, nil
}

// rangeBase is the coord options naming kr at etcd revision erev (0: now).
func rangeBase(kr keyRange, serializable bool, erev int64) []coord.ReadOption {
	var opts []coord.ReadOption
	if serializable {
		opts = append(opts, coord.Serializable())
	}
	switch {
	case kr.single():
		opts = append(opts, coord.Range(""))
	case kr.isPrefix():
		// the prefix form (every key included): coord's own prefix read
	default:
		opts = append(opts, coord.Range(string(kr.end)))
	}
	if erev > 1 {
		opts = append(opts, coord.WithRev(erev-1))
	}
	return opts
}

// listKey is the key (or prefix) List is given for kr.
func listKey(kr keyRange) string {
	if !kr.single() && kr.isPrefix() {
		return kr.asPrefix()
	}
	return string(kr.key)
}

// sortOf is a RangeRequest's sort as coord's (nil: key order, coord's
// own), refusing an order or target etcd does not know as etcd does.
func sortOf(r *pb.RangeRequest) (coord.ReadOption, error) {
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return nil, rpctypes.ErrGRPCInvalidSortOption
	}
	var t coord.SortTarget
	switch r.SortTarget {
	case pb.RangeRequest_KEY:
		t = coord.SortByKey
	case pb.RangeRequest_VERSION:
		t = coord.SortByVersion
	case pb.RangeRequest_CREATE:
		t = coord.SortByCreateRev
	case pb.RangeRequest_MOD:
		t = coord.SortByModRev
	case pb.RangeRequest_VALUE:
		t = coord.SortByValue
	default:
		return nil, rpctypes.ErrGRPCInvalidSortOption
	}
	order := r.SortOrder
	if order == pb.RangeRequest_NONE && r.SortTarget != pb.RangeRequest_KEY {
		order = pb.RangeRequest_ASCEND // etcd's default for another target
	}
	switch {
	case order == pb.RangeRequest_DESCEND:
		return coord.SortBy(t, coord.SortDescend), nil
	case order == pb.RangeRequest_ASCEND && t != coord.SortByKey:
		return coord.SortBy(t, coord.SortAscend), nil
	}
	return nil, nil
}

// filtersOf is a RangeRequest's min/max revision filters in coord's
// numbering (etcd's minus one). none is true when a max of 1 keeps no
// key at all (every etcd key revision is at least 2).
func filtersOf(r *pb.RangeRequest) (opts []coord.ReadOption, none bool) {
	lo := func(v int64, f func(int64) coord.ReadOption) {
		if v > 1 {
			opts = append(opts, f(v-1))
		}
	}
	hi := func(v int64, f func(int64) coord.ReadOption) {
		switch {
		case v == 1:
			none = true
		case v > 1:
			opts = append(opts, f(v-1))
		}
	}
	lo(r.MinModRevision, coord.MinModRev)
	hi(r.MaxModRevision, coord.MaxModRev)
	lo(r.MinCreateRevision, coord.MinCreateRev)
	hi(r.MaxCreateRevision, coord.MaxCreateRev)
	return opts, none
}

// rangeNow returns the keys in kr as the cell has them now, in key
// order, and the revision they were read at.
func rangeNow(ctx context.Context, c coord.Cell, kr keyRange) ([]coord.KV, int64, error) {
	return c.List(ctx, listKey(kr), rangeBase(kr, false, 0)...)
}

// watchRange starts a coord watch of exactly r: one key (ExactKey), a
// prefix, or a [key, end) range (WatchRange). from is the coord FromRev
// (-1: from now).
func watchRange(ctx context.Context, c coord.Cell, r keyRange, from int64, opts ...coord.WatchOption) *coord.Watcher {
	if from >= 0 {
		opts = append(opts, coord.FromRev(from))
	}
	switch {
	case r.single():
		opts = append(opts, coord.ExactKey())
	case r.isPrefix():
	default:
		opts = append(opts, coord.WatchRange(string(r.end)))
	}
	return c.Watch(ctx, listKey(r), opts...)
}

// txnRead is a range read inside a transaction, in coord's ops: the get
// of the one key or of r's prefix, filtered afterwards.
func txnRead(r keyRange) coord.Op {
	if r.single() {
		return coord.OpGet(string(r.key))
	}
	return coord.OpGetPrefix(r.prefix())
}

// txnDelete is a delete of r inside a transaction, when coord can say
// it: one key, or a prefix. ok is false for any other range.
func txnDelete(r keyRange) (coord.Op, bool) {
	switch {
	case r.single():
		return coord.OpDelete(string(r.key)), true
	case r.isPrefix():
		return coord.OpDeletePrefix(r.asPrefix()), true
	}
	return coord.Op{}, false
}

// inRange keeps the keys of kvs in r.
func inRange(kvs []coord.KV, r keyRange) []coord.KV {
	out := make([]coord.KV, 0, len(kvs))
	for _, kv := range kvs {
		if r.contains(kv.Key) {
			out = append(out, kv)
		}
	}
	return out
}
