package etcdapi

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// checkTxnRequest is etcd's (server/etcdserver/api/v3rpc/key.go): the
// most of r's compares, success ops and failure ops is at most maxTxnOps,
// and a nested transaction is held to what that leaves (maxTxnOps less
// that count). Every compare names a key, and each op is one this front
// can run in a transaction. coord's own bounds (Config.MaxTxnOps over
// every compare and op, nested ones counted; 8 levels of nesting) then
// apply to what the front asks of it.
func checkTxnRequest(r *pb.TxnRequest, maxTxnOps int) error {
	opc := max(len(r.Compare), len(r.Success), len(r.Failure))
	if opc > maxTxnOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if err := checkRequestOp(op, maxTxnOps-opc); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkRequestOp checks one op of a transaction, as etcd does, and what
// this front cannot run in one.
func checkRequestOp(op *pb.RequestOp, maxTxnOps int) error {
	switch o := op.Request.(type) {
	case *pb.RequestOp_RequestPut:
		if err := checkPut(o.RequestPut); err != nil {
			return err
		}
		if o.RequestPut.IgnoreValue || o.RequestPut.IgnoreLease {
			return unimplemented("ignore_value and ignore_lease in a Txn")
		}
	case *pb.RequestOp_RequestDeleteRange:
		d := o.RequestDeleteRange
		if len(d.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
		if _, ok := txnDelete(rangeOf(d.Key, d.RangeEnd)); !ok {
			return unimplemented("a DeleteRange of a range that is neither one key nor a prefix, in a Txn")
		}
	case *pb.RequestOp_RequestRange:
		if len(o.RequestRange.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	case *pb.RequestOp_RequestTxn:
		if o.RequestTxn == nil {
			return status.Error(codes.InvalidArgument, "etcdapi: a Txn op with no request")
		}
		return checkTxnRequest(o.RequestTxn, maxTxnOps)
	default:
		return status.Error(codes.InvalidArgument, "etcdapi: a Txn op with no request")
	}
	return nil
}

// txnWrites is what a branch writes, for checkIntervals: the keys it
// puts, and the ranges it deletes.
type txnWrites struct {
	puts map[string]bool
	dels []keyRange
}

func (w *txnWrites) deletes(k string) bool {
	for _, d := range w.dels {
		if d.contains(k) {
			return true
		}
	}
	return false
}

// checkIntervals is etcd's (server/etcdserver/api/v3rpc/key.go), line for
// line: a branch may not put a key twice nor put a key a delete covers
// (ErrGRPCDuplicateKey), where a nested transaction's puts and deletes,
// of both its branches, count as the branch's: a put of this level, or of
// a later nested transaction, is checked against this level's deletes
// and those of the nested transactions before it; the two branches of
// one nested transaction may put the same key. coord's own rule
// (command.DuplicateWrite) is the same, so what passes here passes there.
func checkIntervals(reqs []*pb.RequestOp) (*txnWrites, error) {
	w := &txnWrites{puts: map[string]bool{}}
	for _, req := range reqs {
		if d := req.GetRequestDeleteRange(); d != nil {
			w.dels = append(w.dels, rangeOf(d.Key, d.RangeEnd))
		}
	}
	for _, req := range reqs {
		nt := req.GetRequestTxn()
		if nt == nil {
			continue
		}
		then, err := checkIntervals(nt.Success)
		if err != nil {
			return nil, err
		}
		els, err := checkIntervals(nt.Failure)
		if err != nil {
			return nil, err
		}
		for k := range then.puts {
			if w.puts[k] || w.deletes(k) {
				return nil, rpctypes.ErrGRPCDuplicateKey
			}
			w.puts[k] = true
		}
		for k := range els.puts {
			// A key then also puts is safe: only one branch runs.
			if w.puts[k] && !then.puts[k] || w.deletes(k) {
				return nil, rpctypes.ErrGRPCDuplicateKey
			}
			w.puts[k] = true
		}
		w.dels = append(w.dels, then.dels...)
		w.dels = append(w.dels, els.dels...)
	}
	for _, req := range reqs {
		p := req.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if w.puts[k] || w.deletes(k) {
			return nil, rpctypes.ErrGRPCDuplicateKey
		}
		w.puts[k] = true
	}
	return w, nil
}
