package etcdapi

import (
	"bytes"
	"cmp"
	"context"
	"slices"

	"github.com/coordcell/coord"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// kvServer is etcd's KV service over the cell.
type kvServer struct {
	pb.UnimplementedKVServer
	s *server
}

// toKV is a coord key as etcd's KeyValue; a lease is the key's session.
func toKV(kv coord.KV, keysOnly bool) *mvccpb.KeyValue {
	out := &mvccpb.KeyValue{Key: []byte(kv.Key), CreateRevision: etcdKeyRev(kv.CreateRev), ModRevision: etcdKeyRev(kv.ModRev),
		Version: kv.Version, Lease: int64(kv.Session)}
	if !keysOnly {
		out.Value = kv.Value
	}
	return out
}

func rangeOf(key, end []byte) keyRange { return keyRange{key: key, end: end} }

// coordRev is the coord revision of a request's etcd revision (0: now,
// -1 here).
func coordRev(r int64) int64 {
	if r <= 0 {
		return -1
	}
	return r - 1
}

// Range reads a key or a range, at the present or (within the retained
// history) a past revision.
func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if len(r.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	resp, err := k.s.rangeResp(ctx, r)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// rangeResp answers one RangeRequest from one coord read (two when it
// filters on revisions: etcd's count is of the range before them).
func (s *server) rangeResp(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	kvs, count, more, rev, err := readRange(ctx, s.cell, r)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.RangeResponse{Header: s.header(rev), Kvs: kvsOf(kvs, r.KeysOnly), Count: count, More: more}, nil
}

// shapeRange applies a RangeRequest's filters, sort, limit, keys_only and
// count_only to the keys in its range (in key order), as etcd does, for
// a range read inside a transaction (coord's ops get a key or a prefix):
// count is every key in the range, more says the limit or the filters
// left some out.
func shapeRange(r *pb.RangeRequest, kvs []coord.KV) (*pb.RangeResponse, error) {
	resp := &pb.RangeResponse{Count: int64(len(kvs))}
	kept := kvs[:0:0]
	for _, kv := range kvs {
		switch {
		case r.MinModRevision > 0 && etcdKeyRev(kv.ModRev) < r.MinModRevision,
			r.MaxModRevision > 0 && etcdKeyRev(kv.ModRev) > r.MaxModRevision,
			r.MinCreateRevision > 0 && etcdKeyRev(kv.CreateRev) < r.MinCreateRevision,
			r.MaxCreateRevision > 0 && etcdKeyRev(kv.CreateRev) > r.MaxCreateRevision:
			continue
		}
		kept = append(kept, kv)
	}
	if r.CountOnly {
		return resp, nil
	}
	order := r.SortOrder
	if order == pb.RangeRequest_NONE && r.SortTarget != pb.RangeRequest_KEY {
		order = pb.RangeRequest_ASCEND
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(order)]; !ok {
		return nil, rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return nil, rpctypes.ErrGRPCInvalidSortOption
	}
	if order != pb.RangeRequest_NONE {
		by := func(a, b coord.KV) int {
			switch r.SortTarget {
			case pb.RangeRequest_VERSION:
				return cmp.Compare(a.Version, b.Version)
			case pb.RangeRequest_CREATE:
				return cmp.Compare(a.CreateRev, b.CreateRev)
			case pb.RangeRequest_MOD:
				return cmp.Compare(a.ModRev, b.ModRev)
			case pb.RangeRequest_VALUE:
				return bytes.Compare(a.Value, b.Value)
			}
			return cmp.Compare(a.Key, b.Key)
		}
		if order == pb.RangeRequest_DESCEND {
			slices.SortStableFunc(kept, func(a, b coord.KV) int { return by(b, a) })
		} else {
			slices.SortStableFunc(kept, by)
		}
	}
	if r.Limit > 0 && int64(len(kept)) > r.Limit {
		kept = kept[:r.Limit]
		resp.More = true
	}
	resp.Kvs = make([]*mvccpb.KeyValue, len(kept))
	for i, kv := range kept {
		resp.Kvs[i] = toKV(kv, r.KeysOnly)
	}
	return resp, nil
}

// Put writes a key, with a lease (the key then belongs to the lease's
// session), returning the key before it when asked.
func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPut(r); err != nil {
		return nil, err
	}
	if r.IgnoreValue || r.IgnoreLease {
		return k.putKeeping(ctx, r)
	}
	op, err := k.s.putOp(ctx, string(r.Key), r.Value, r.Lease)
	if err != nil {
		return nil, err
	}
	// prev_kv is a get before the put, in the same transaction.
	ops := []coord.Op{op}
	if r.PrevKv {
		ops = []coord.Op{coord.OpGet(string(r.Key)), op}
	}
	res, err := k.s.cell.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, k.s.alarm.noteErr(toGRPC(err))
	}
	k.s.alarm.wrote()
	resp := &pb.PutResponse{Header: k.s.header(res.Rev)}
	if r.PrevKv && len(res.Results[0].KVs) > 0 {
		resp.PrevKv = toKV(res.Results[0].KVs[0], false)
	}
	return resp, nil
}

func checkPut(r *pb.PutRequest) error {
	switch {
	case len(r.Key) == 0:
		return rpctypes.ErrGRPCEmptyKey
	case r.IgnoreValue && len(r.Value) != 0:
		return rpctypes.ErrGRPCValueProvided
	case r.IgnoreLease && r.Lease != 0:
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

// putOp is the coord put of key, on the session of lease (0: none).
func (s *server) putOp(ctx context.Context, key string, value []byte, lease int64) (coord.Op, error) {
	if lease == 0 {
		return coord.OpPut(key, value), nil
	}
	sess, err := s.leases.handle(ctx, lease)
	if err != nil {
		return coord.Op{}, err
	}
	return coord.OpPut(key, value, coord.Ephemeral(sess)), nil
}

// putKeeping is a Put with ignore_value or ignore_lease: the key's
// current value or lease stays, by a compare-and-set on its mod
// revision, retried while others write it.
func (k *kvServer) putKeeping(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	key := string(r.Key)
	for range 16 {
		kvs, _, err := rangeNow(ctx, k.s.cell, rangeOf(r.Key, nil))
		if err != nil {
			return nil, toGRPC(err)
		}
		if len(kvs) == 0 {
			return nil, rpctypes.ErrGRPCKeyNotFound
		}
		cur := kvs[0]
		value, lease := r.Value, r.Lease
		if r.IgnoreValue {
			value = cur.Value
		}
		if r.IgnoreLease {
			lease = int64(cur.Session)
		}
		op, err := k.s.putOp(ctx, key, value, lease)
		if err != nil {
			return nil, err
		}
		res, err := k.s.cell.Txn(ctx).If(coord.ModRev(key).Eq(cur.ModRev)).Then(op).Commit()
		if err != nil {
			return nil, k.s.alarm.noteErr(toGRPC(err))
		}
		if !res.Succeeded {
			continue
		}
		k.s.alarm.wrote()
		resp := &pb.PutResponse{Header: k.s.header(res.Rev)}
		if r.PrevKv {
			resp.PrevKv = toKV(cur, false)
		}
		return resp, nil
	}
	return nil, rpctypes.ErrGRPCRequestTooManyRequests
}

// DeleteRange deletes a key, a prefix or a range.
func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if len(r.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	kr := rangeOf(r.Key, r.RangeEnd)
	if del, ok := txnDelete(kr); ok {
		// Only prev_kv reads what it deletes (a large prefix deleted
		// without it reads nothing).
		ops := []coord.Op{del}
		if r.PrevKv {
			ops = []coord.Op{txnRead(kr), del}
		}
		res, err := k.s.cell.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, toGRPC(err)
		}
		resp := &pb.DeleteRangeResponse{Header: k.s.header(res.Rev), Deleted: res.Results[len(ops)-1].Deleted}
		if r.PrevKv {
			resp.PrevKvs = kvsOf(inRange(res.Results[0].KVs, kr), false)
		}
		return resp, nil
	}
	// A range coord cannot name in one op: delete the keys it holds now,
	// each only if unchanged, in one transaction. A key put into the
	// range meanwhile is not deleted (see docs/etcd.md).
	kvs, rev, err := rangeNow(ctx, k.s.cell, kr)
	if err != nil {
		return nil, toGRPC(err)
	}
	if len(kvs) == 0 {
		return &pb.DeleteRangeResponse{Header: k.s.header(rev)}, nil
	}
	txn := k.s.cell.Txn(ctx)
	for _, kv := range kvs {
		txn.If(coord.ModRev(kv.Key).Eq(kv.ModRev)).Then(coord.OpDelete(kv.Key))
	}
	res, err := txn.Commit()
	if err != nil {
		return nil, k.s.alarm.noteErr(toGRPC(err))
	}
	if !res.Succeeded {
		// Changed under us: etcd's DeleteRange would have taken the new
		// state; ask the client to retry.
		return nil, rpctypes.ErrGRPCTimeout
	}
	resp := &pb.DeleteRangeResponse{Header: k.s.header(res.Rev), Deleted: int64(len(kvs))}
	if r.PrevKv {
		resp.PrevKvs = kvsOf(kvs, false)
	}
	return resp, nil
}

func kvsOf(kvs []coord.KV, keysOnly bool) []*mvccpb.KeyValue {
	out := make([]*mvccpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = toKV(kv, keysOnly)
	}
	return out
}

// Compact answers success without changing anything: a coord cell keeps
// a bounded change history of its own (Config.HistoryRevisions) and
// drops the oldest itself; a revision past the present is refused as
// etcd refuses it.
func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	rev, err := k.s.currentRev(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	if r.Revision > etcdRev(rev) {
		return nil, rpctypes.ErrGRPCFutureRev
	}
	return &pb.CompactionResponse{Header: k.s.header(rev)}, nil
}
