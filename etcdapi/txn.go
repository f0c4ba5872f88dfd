package etcdapi

import (
	"context"

	"github.com/coordcell/coord"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultMaxTxnOps is etcd's --max-txn-ops default: the most compares,
// and the most operations of each branch, one Txn may hold. The cell's
// own bound (Config.MaxTxnOps, 128 by default) also applies to the ops
// coord runs for it (a prev_kv or a range adds a read).
const DefaultMaxTxnOps = 128

// Txn runs etcd's transaction as one coord transaction: the compares
// become coord's, each branch's ops coord's ops, and the results are
// shaped back per op. A transaction that only reads at a revision (an
// STM's snapshot reads) is read op by op at that revision instead.
func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if len(r.Compare) > DefaultMaxTxnOps || len(r.Success) > DefaultMaxTxnOps || len(r.Failure) > DefaultMaxTxnOps {
		return nil, rpctypes.ErrGRPCTooManyOps
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		if err := checkOps(ops); err != nil {
			return nil, err
		}
	}
	if len(r.Compare) == 0 && len(r.Failure) == 0 && readsAtRev(r.Success) {
		return k.readTxn(ctx, r.Success)
	}
	if anyAtRev(r.Success) || anyAtRev(r.Failure) {
		return nil, unimplemented("a range at a past revision in a Txn that writes or compares")
	}
	txn := k.s.cell.Txn(ctx)
	for _, c := range r.Compare {
		cc, err := toCmp(c)
		if err != nil {
			return nil, err
		}
		txn.If(cc)
	}
	then, thenPlan, err := k.s.toOps(ctx, r.Success)
	if err != nil {
		return nil, err
	}
	els, elsePlan, err := k.s.toOps(ctx, r.Failure)
	if err != nil {
		return nil, err
	}
	res, err := txn.Then(then...).Else(els...).Commit()
	if err != nil {
		return nil, k.s.alarm.noteErr(toGRPC(err))
	}
	ops, plan := r.Success, thenPlan
	if !res.Succeeded {
		ops, plan = r.Failure, elsePlan
	}
	resp := &pb.TxnResponse{Header: k.s.header(res.Rev), Succeeded: res.Succeeded,
		Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		out, err := shapeOp(op, res.Results[plan[i]:plan[i+1]])
		if err != nil {
			return nil, err
		}
		setHeader(out, resp.Header)
		resp.Responses[i] = out
	}
	if len(then)+len(els) > 0 {
		k.s.alarm.wrote()
	}
	return resp, nil
}

// readsAtRev reports whether every op reads, and some at a revision.
func readsAtRev(ops []*pb.RequestOp) bool {
	at := false
	for _, op := range ops {
		rr := op.GetRequestRange()
		if rr == nil {
			return false
		}
		at = at || rr.Revision != 0
	}
	return at
}

// anyAtRev reports whether some op reads at a revision.
func anyAtRev(ops []*pb.RequestOp) bool {
	for _, op := range ops {
		if rr := op.GetRequestRange(); rr != nil && rr.Revision != 0 {
			return true
		}
	}
	return false
}

// readTxn reads each range at its revision, each one coord read: ranges
// at the same revision agree, as in one etcd read.
func (k *kvServer) readTxn(ctx context.Context, ops []*pb.RequestOp) (*pb.TxnResponse, error) {
	resp := &pb.TxnResponse{Succeeded: true, Responses: make([]*pb.ResponseOp, len(ops))}
	var now int64
	for i, op := range ops {
		rr := op.GetRequestRange()
		if len(rr.Key) == 0 {
			return nil, rpctypes.ErrGRPCEmptyKey
		}
		out, err := k.s.rangeResp(ctx, rr)
		if err != nil {
			return nil, err
		}
		now = max(now, out.Header.Revision)
		resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: out}}
	}
	resp.Header = k.s.header(now - 1)
	for _, r := range resp.Responses {
		setHeader(r, resp.Header)
	}
	return resp, nil
}

// checkOps refuses, as etcd does, a branch that puts one key twice or
// puts a key a delete of the branch covers, and what this front cannot
// run in a transaction.
func checkOps(ops []*pb.RequestOp) error {
	puts := make(map[string]bool)
	var dels []keyRange
	for _, op := range ops {
		switch o := op.Request.(type) {
		case *pb.RequestOp_RequestPut:
			if err := checkPut(o.RequestPut); err != nil {
				return err
			}
			if o.RequestPut.IgnoreValue || o.RequestPut.IgnoreLease {
				return unimplemented("ignore_value and ignore_lease in a Txn")
			}
			k := string(o.RequestPut.Key)
			if puts[k] {
				return rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = true
		case *pb.RequestOp_RequestDeleteRange:
			d := o.RequestDeleteRange
			if len(d.Key) == 0 {
				return rpctypes.ErrGRPCEmptyKey
			}
			kr := rangeOf(d.Key, d.RangeEnd)
			if _, ok := txnDelete(kr); !ok {
				return unimplemented("a DeleteRange of a range that is neither one key nor a prefix, in a Txn")
			}
			dels = append(dels, kr)
		case *pb.RequestOp_RequestRange:
			rr := o.RequestRange
			if len(rr.Key) == 0 {
				return rpctypes.ErrGRPCEmptyKey
			}
		case *pb.RequestOp_RequestTxn:
			return unimplemented("a nested Txn")
		default:
			return status.Error(codes.InvalidArgument, "etcdapi: a Txn op with no request")
		}
	}
	for k := range puts {
		for _, d := range dels {
			if d.contains(k) {
				return rpctypes.ErrGRPCDuplicateKey
			}
		}
	}
	return nil
}

// toCmp is an etcd compare as coord's.
func toCmp(c *pb.Compare) (coord.Cmp, error) {
	if len(c.Key) == 0 {
		return coord.Cmp{}, rpctypes.ErrGRPCEmptyKey
	}
	if len(c.RangeEnd) != 0 {
		return coord.Cmp{}, unimplemented("a compare over a range (range_end)")
	}
	key := string(c.Key)
	if c.Target == pb.Compare_VALUE {
		return compareBy(coord.Value(key), c.Result, c.GetValue())
	}
	var t coord.IntTarget
	var want int64
	switch c.Target {
	case pb.Compare_VERSION:
		t, want = coord.Version(key), c.GetVersion()
	case pb.Compare_CREATE:
		t, want = coord.CreateRev(key), c.GetCreateRevision()
		return revCmp(t, c.Result, want)
	case pb.Compare_MOD:
		t, want = coord.ModRev(key), c.GetModRevision()
		return revCmp(t, c.Result, want)
	case pb.Compare_LEASE:
		// A lease is the coord session of the same ID (what Put's lease
		// and a key's lease field carry), 0 for none in both.
		t, want = coord.SessionOf(key), c.GetLease()
	default:
		return coord.Cmp{}, unimplemented("this compare target")
	}
	return compareBy(t, c.Result, want)
}

// target is what coord compares a key by: its value or one of its
// numbers.
type target[V any] interface {
	Eq(V) coord.Cmp
	Ne(V) coord.Cmp
	Lt(V) coord.Cmp
	Gt(V) coord.Cmp
}

// compareBy is etcd's compare result res of t with want.
func compareBy[V any](t target[V], res pb.Compare_CompareResult, want V) (coord.Cmp, error) {
	switch res {
	case pb.Compare_EQUAL:
		return t.Eq(want), nil
	case pb.Compare_NOT_EQUAL:
		return t.Ne(want), nil
	case pb.Compare_LESS:
		return t.Lt(want), nil
	case pb.Compare_GREATER:
		return t.Gt(want), nil
	}
	return coord.Cmp{}, unimplemented("this compare result")
}

// revCmp is a compare of a key's create or mod revision with etcd's
// number want: a present key's etcd revision is coord's plus one (at
// least 2), an absent key's 0 in both. want >= 2 compares with want-1;
// want <= 0 as it is; want 1, which no key has, by what etcd answers
// (present keys are above it, absent ones below).
func revCmp(t coord.IntTarget, res pb.Compare_CompareResult, want int64) (coord.Cmp, error) {
	switch {
	case want >= 2:
		want--
	case want == 1:
		switch res {
		case pb.Compare_EQUAL:
			return t.Eq(-1), nil // never
		case pb.Compare_NOT_EQUAL:
			return t.Ne(-1), nil // always
		case pb.Compare_LESS:
			return t.Lt(1), nil // absent only
		case pb.Compare_GREATER:
			return t.Gt(0), nil // present only
		}
	}
	return compareBy(t, res, want)
}

// toOps is a branch as coord ops, with plan[i]:plan[i+1] the results of
// etcd op i: a put is a get (its prev_kv) then the put; a delete a get
// then the delete; a range one get.
func (s *server) toOps(ctx context.Context, ops []*pb.RequestOp) ([]coord.Op, []int, error) {
	out := make([]coord.Op, 0, 2*len(ops))
	plan := make([]int, 0, len(ops)+1)
	plan = append(plan, 0)
	for _, op := range ops {
		switch o := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			out = append(out, txnRead(rangeOf(o.RequestRange.Key, o.RequestRange.RangeEnd)))
		case *pb.RequestOp_RequestPut:
			p := o.RequestPut
			put, err := s.putOp(ctx, string(p.Key), p.Value, p.Lease)
			if err != nil {
				return nil, nil, err
			}
			if p.PrevKv {
				out = append(out, coord.OpGet(string(p.Key)))
			}
			out = append(out, put)
		case *pb.RequestOp_RequestDeleteRange:
			d := o.RequestDeleteRange
			kr := rangeOf(d.Key, d.RangeEnd)
			del, _ := txnDelete(kr)
			if d.PrevKv {
				out = append(out, txnRead(kr))
			}
			out = append(out, del)
		}
		plan = append(plan, len(out))
	}
	return out, plan, nil
}

// setHeader gives an op's response the transaction's header, as etcd
// does (clientv3's STM reads an inner range's revision from it).
func setHeader(r *pb.ResponseOp, h *pb.ResponseHeader) {
	switch o := r.Response.(type) {
	case *pb.ResponseOp_ResponseRange:
		o.ResponseRange.Header = h
	case *pb.ResponseOp_ResponsePut:
		o.ResponsePut.Header = h
	case *pb.ResponseOp_ResponseDeleteRange:
		o.ResponseDeleteRange.Header = h
	}
}

// shapeOp is the etcd response of op from its coord results.
func shapeOp(op *pb.RequestOp, res []coord.OpResult) (*pb.ResponseOp, error) {
	switch o := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		rr := o.RequestRange
		out, err := shapeRange(rr, inRange(res[0].KVs, rangeOf(rr.Key, rr.RangeEnd)))
		if err != nil {
			return nil, err
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: out}}, nil
	case *pb.RequestOp_RequestPut:
		out := &pb.PutResponse{}
		if o.RequestPut.PrevKv && len(res[0].KVs) > 0 {
			out.PrevKv = toKV(res[0].KVs[0], false)
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: out}}, nil
	case *pb.RequestOp_RequestDeleteRange:
		d := o.RequestDeleteRange
		out := &pb.DeleteRangeResponse{Deleted: res[len(res)-1].Deleted}
		if d.PrevKv {
			out.PrevKvs = kvsOf(inRange(res[0].KVs, rangeOf(d.Key, d.RangeEnd)), false)
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: out}}, nil
	}
	return nil, unimplemented("this Txn op")
}
