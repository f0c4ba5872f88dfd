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
// become coord's, each branch's ops coord's ops (a nested transaction a
// coord.OpTxn), and the results are shaped back per op. A transaction
// that only reads at a revision (an STM's snapshot reads) is read op by
// op at that revision instead. Requests are checked as etcd's kvServer
// checks them: the op counts (checkTxnRequest), then the duplicate rule
// (checkIntervals).
func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := checkTxnRequest(r, DefaultMaxTxnOps); err != nil {
		return nil, err
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		if _, err := checkIntervals(ops); err != nil {
			return nil, err
		}
	}
	if len(r.Compare) == 0 && len(r.Failure) == 0 && readsAtRev(r.Success) {
		return k.readTxn(ctx, r.Success)
	}
	if anyAtRev(r.Success) || anyAtRev(r.Failure) {
		return nil, unimplemented("a range at a past revision in a Txn that writes or compares")
	}
	cmps, err := toCmps(r.Compare)
	if err != nil {
		return nil, err
	}
	then, thenPlan, err := k.s.toOps(ctx, r.Success)
	if err != nil {
		return nil, err
	}
	els, elsePlan, err := k.s.toOps(ctx, r.Failure)
	if err != nil {
		return nil, err
	}
	res, err := k.s.cell.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	if err != nil {
		return nil, k.s.alarm.noteErr(toGRPC(err))
	}
	h := k.s.header(res.Rev)
	resp, err := shapeTxn(r, &txnPlan{then: thenPlan, els: elsePlan}, res.Succeeded, res.Results, h)
	if err != nil {
		return nil, err
	}
	resp.Header = h
	if len(then)+len(els) > 0 {
		k.s.alarm.wrote()
	}
	return resp, nil
}

// toCmps is etcd's compares as coord's.
func toCmps(cs []*pb.Compare) ([]coord.Cmp, error) {
	out := make([]coord.Cmp, 0, len(cs))
	for _, c := range cs {
		cc, err := toCmp(c)
		if err != nil {
			return nil, err
		}
		out = append(out, cc)
	}
	return out, nil
}

// shapeTxn is the etcd response of r, whose branches were planned as p,
// from the coord results of the branch that ran (succeeded says which).
// Every op's response carries header h, as etcd's do; a nested
// transaction's own header is left empty, as etcd leaves it.
func shapeTxn(r *pb.TxnRequest, p *txnPlan, succeeded bool, res []coord.OpResult, h *pb.ResponseHeader) (*pb.TxnResponse, error) {
	ops, plan := r.Success, p.then
	if !succeeded {
		ops, plan = r.Failure, p.els
	}
	resp := &pb.TxnResponse{Header: &pb.ResponseHeader{}, Succeeded: succeeded, Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		got := res[plan.bounds[i]:plan.bounds[i+1]]
		if nt := op.GetRequestTxn(); nt != nil {
			if len(got) != 1 || got[0].Txn == nil {
				return nil, status.Error(codes.Internal, "etcdapi: a nested transaction without its result")
			}
			in, err := shapeTxn(nt, plan.nested[i], got[0].Txn.Succeeded, got[0].Txn.Results, h)
			if err != nil {
				return nil, err
			}
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: in}}
			continue
		}
		out, err := shapeOp(op, got)
		if err != nil {
			return nil, err
		}
		setHeader(out, h)
		resp.Responses[i] = out
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

// anyAtRev reports whether some op reads at a revision, in a nested
// transaction too.
func anyAtRev(ops []*pb.RequestOp) bool {
	for _, op := range ops {
		if rr := op.GetRequestRange(); rr != nil && rr.Revision != 0 {
			return true
		}
		if nt := op.GetRequestTxn(); nt != nil && (anyAtRev(nt.Success) || anyAtRev(nt.Failure)) {
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

// branchPlan is where the coord results of a branch's etcd ops are:
// bounds[i]:bounds[i+1] are op i's, and nested[i] is the plan of op i's
// branches when it is a nested transaction.
type branchPlan struct {
	bounds []int
	nested map[int]*txnPlan
}

// txnPlan is the plan of a transaction's two branches.
type txnPlan struct{ then, els branchPlan }

// toOps is a branch as coord ops, with its plan: a put is a get (its
// prev_kv) then the put; a delete a get then the delete; a range one
// get; a nested transaction one coord.OpTxn.
func (s *server) toOps(ctx context.Context, ops []*pb.RequestOp) ([]coord.Op, branchPlan, error) {
	out := make([]coord.Op, 0, 2*len(ops))
	plan := branchPlan{bounds: make([]int, 0, len(ops)+1)}
	plan.bounds = append(plan.bounds, 0)
	for i, op := range ops {
		switch o := op.Request.(type) {
		case *pb.RequestOp_RequestTxn:
			nt := o.RequestTxn
			cmps, err := toCmps(nt.Compare)
			if err != nil {
				return nil, plan, err
			}
			then, thenPlan, err := s.toOps(ctx, nt.Success)
			if err != nil {
				return nil, plan, err
			}
			els, elsePlan, err := s.toOps(ctx, nt.Failure)
			if err != nil {
				return nil, plan, err
			}
			if plan.nested == nil {
				plan.nested = map[int]*txnPlan{}
			}
			plan.nested[i] = &txnPlan{then: thenPlan, els: elsePlan}
			out = append(out, coord.OpTxn(cmps, then, els))
		case *pb.RequestOp_RequestRange:
			out = append(out, txnRead(rangeOf(o.RequestRange.Key, o.RequestRange.RangeEnd)))
		case *pb.RequestOp_RequestPut:
			p := o.RequestPut
			put, err := s.putOp(ctx, string(p.Key), p.Value, p.Lease)
			if err != nil {
				return nil, plan, err
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
		plan.bounds = append(plan.bounds, len(out))
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
