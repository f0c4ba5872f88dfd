package etcdapi

// The read adapter: etcd's reads (a [key, range_end) range at a
// revision, an exact-key watch) built from what the coord API offers
// today (List of a prefix, Get, a prefix Watch from a revision). It is
// the one place to change when coord's reads take ranges, revisions and
// exact keys themselves: nothing else in the package reads the cell.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/coordcell/coord"
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

// isPrefix reports whether r is exactly the keys under r.prefix() (etcd's
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

// listAfter is the After for a List of r.prefix() that skips what sorts
// before r.key, without skipping r.key: the last byte decremented (what
// then sorts between it and r.key starts with it and is filtered out).
func (r keyRange) listAfter() string {
	p := r.prefix()
	if len(r.key) <= len(p) {
		return ""
	}
	k := r.key
	if last := k[len(k)-1]; last > 0 {
		return string(k[:len(k)-1]) + string([]byte{last - 1})
	}
	return string(k[:len(k)-1])
}

// errFutureRev is the read adapter's refusal of a revision past the
// present; the handlers answer it as etcd does (ErrGRPCFutureRev).
var errFutureRev = errors.New("etcdapi: required revision is a future revision")

// rangeNow returns the keys in r as the cell has them now, in key order,
// and the revision they were read at.
func rangeNow(ctx context.Context, c coord.Cell, r keyRange, serializable bool) ([]coord.KV, int64, error) {
	var ropts []coord.ReadOption
	if serializable {
		ropts = append(ropts, coord.Serializable())
	}
	if r.single() {
		// List rather than Get: it says the revision it read at. The key
		// is the first under itself as a prefix, so one is enough.
		kvs, rev, err := c.List(ctx, string(r.key), append(ropts, coord.Limit(1))...)
		if err != nil {
			return nil, 0, err
		}
		for _, kv := range kvs {
			if kv.Key == string(r.key) {
				return []coord.KV{kv}, rev, nil
			}
		}
		return nil, rev, nil
	}
	if a := r.listAfter(); a != "" {
		ropts = append(ropts, coord.After(a))
	}
	kvs, rev, err := c.List(ctx, r.prefix(), ropts...)
	if err != nil {
		return nil, 0, err
	}
	out := kvs[:0]
	for _, kv := range kvs {
		if r.contains(kv.Key) {
			out = append(out, kv)
		}
	}
	return out, rev, nil
}

// rangeAt returns the keys in r at coord revision rev (-1: now), in key order,
// and the revision of the state it started from (the cell's now, as
// etcd's response header says). A past revision is rebuilt from the
// present and the change history after rev: each key changed since has
// its value before its first change after rev. A rev older than the
// history gives a *coord.CompactedError, one past the present
// errFutureRev.
func rangeAt(ctx context.Context, c coord.Cell, r keyRange, rev int64, serializable bool) ([]coord.KV, int64, error) {
	kvs, now, err := rangeNow(ctx, c, r, serializable)
	if err != nil || rev < 0 || rev == now {
		return kvs, now, err
	}
	if rev > now {
		return nil, now, fmt.Errorf("%w: %d > %d", errFutureRev, rev, now)
	}
	before, err := changedSince(ctx, c, r, rev, now)
	if err != nil {
		return nil, now, err
	}
	out := make([]coord.KV, 0, len(kvs))
	for _, kv := range kvs {
		if _, changed := before[kv.Key]; !changed {
			out = append(out, kv)
		}
	}
	for _, prev := range before {
		if prev != nil {
			out = append(out, *prev)
		}
	}
	sortByKey(out)
	return out, now, nil
}

// changedSince watches r from rev to now and returns, for every key in r
// changed in (rev, now], the key as it was at rev (nil: absent then).
func changedSince(ctx context.Context, c coord.Cell, r keyRange, rev, now int64) (map[string]*coord.KV, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := c.Watch(ctx, r.prefix(), coord.FromRev(rev), coord.WithPrevKV(), coord.WithMaxLag(0))
	defer w.Close()
	before := make(map[string]*coord.KV)
	asked := false
	for {
		if !asked {
			// Ask to hear when the watch is current, so a quiet range ends
			// the walk too.
			w.RequestProgress()
			asked = true
		}
		select {
		case ev, ok := <-w.Events():
			if !ok {
				if err := w.Err(); err != nil {
					return nil, err
				}
				return nil, ctx.Err()
			}
			if ev.Rev > now {
				return before, nil
			}
			if ev.Type == coord.EventProgress {
				if ev.Rev >= now {
					return before, nil
				}
				asked = false
				continue
			}
			if !r.contains(ev.KV.Key) {
				continue
			}
			if _, seen := before[ev.KV.Key]; !seen {
				before[ev.KV.Key] = ev.PrevKV
			}
			if ev.Rev == now && ev.EndOfRev {
				return before, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// watchRange starts a coord watch that sees every change in r: a watch of
// r's prefix, whose events outside r the caller drops (filter). from is
// the coord FromRev (-1: from now).
func watchRange(ctx context.Context, c coord.Cell, r keyRange, from int64, opts ...coord.WatchOption) *coord.Watcher {
	if from >= 0 {
		opts = append(opts, coord.FromRev(from))
	}
	return c.Watch(ctx, r.prefix(), opts...)
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
		return coord.OpDeletePrefix(r.prefix()), true
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

func sortByKey(kvs []coord.KV) {
	slices.SortFunc(kvs, func(a, b coord.KV) int { return strings.Compare(a.Key, b.Key) })
}
