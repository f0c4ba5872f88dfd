package etcdcell

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ cell.Scaler = (*Member)(nil)

// PutBatch writes the keys in one transaction.
func (m *Member) PutBatch(ctx context.Context, keys []string, value []byte) error {
	ops := make([]clientv3.Op, len(keys))
	v := string(value)
	for i, k := range keys {
		ops[i] = clientv3.OpPut(k, v)
	}
	_, err := m.cl.Txn(ctx).Then(ops...).Commit()
	return err
}

// DeleteBatch deletes the keys in one transaction.
func (m *Member) DeleteBatch(ctx context.Context, keys []string) error {
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpDelete(k)
	}
	_, err := m.cl.Txn(ctx).Then(ops...).Commit()
	return err
}

// PutRev writes and returns the write's revision.
func (m *Member) PutRev(ctx context.Context, key string, value []byte) (int64, error) {
	resp, err := m.cl.Put(ctx, key, string(value))
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// ListPage lists one page: a range read from just after after (or the
// prefix) to the prefix's end, with etcd's range limit.
func (m *Member) ListPage(ctx context.Context, prefix, after string, limit int) (int, string, int64, error) {
	from := prefix
	if after >= prefix {
		from = after + "\x00"
	}
	resp, err := m.cl.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(int64(limit)))
	if err != nil || len(resp.Kvs) == 0 {
		return 0, after, 0, err
	}
	var b int64
	for _, kv := range resp.Kvs {
		b += int64(len(kv.Key) + len(kv.Value))
	}
	return len(resp.Kvs), string(resp.Kvs[len(resp.Kvs)-1].Key), b, nil
}

// WatchFrom watches prefix from revision rev+1 (WithRev) and returns once
// etcd has confirmed the watch.
func (m *Member) WatchFrom(ctx context.Context, prefix string, rev int64, fn func(rev int64)) (func() error, error) {
	wch := m.cl.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithCreatedNotify())
	select {
	case resp, ok := <-wch:
		if !ok {
			return nil, fmt.Errorf("etcd watch of %q ended at once: %w", prefix, ctx.Err())
		}
		if err := resp.Err(); err != nil {
			return nil, err
		}
		// The creation notice may carry no events; if it does, count them.
		for _, ev := range resp.Events {
			fn(ev.Kv.ModRevision)
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var ended error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range wch {
			if err := resp.Err(); err != nil {
				ended = err
			}
			for _, ev := range resp.Events {
				fn(ev.Kv.ModRevision)
			}
		}
	}()
	return func() error {
		select {
		case <-done:
			if ended == nil {
				return errors.New("etcd watch ended")
			}
			return ended
		default:
			return nil
		}
	}, nil
}

// QuotaRefused reports etcd's NOSPACE refusal.
func (m *Member) QuotaRefused(err error) bool {
	return err != nil && rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCNoSpace)
}

// ScaleStatus reads the server's indexes, revision and database size,
// and counts its leases (LeaseLeases, answered from the member's own
// lessor; -1 on a learner, which answers no lease requests).
func (m *Member) ScaleStatus(ctx context.Context) (cell.ScaleStatus, error) {
	s := m.e.Server
	be := s.Backend()
	st := cell.ScaleStatus{Applied: s.AppliedIndex(), Commit: s.CommittedIndex(), Revision: s.KV().Rev(),
		Leader: s.Leader() == s.MemberID(), KeyspaceBytes: -1, DBBytes: be.Size(), DBInUseBytes: be.SizeInUse(),
		Sessions: -1}
	if s.IsLearner() {
		return st, nil // it answers no lease requests
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if ls, err := m.cl.Leases(lctx); err == nil {
		st.Sessions = int64(len(ls.Leases))
	}
	return st, nil
}

// AddLearner adds a learner at peerAddr (MemberAddAsLearner); the new
// member then starts with the "existing" cluster state.
func (m *Member) AddLearner(ctx context.Context, name, peerAddr string) error {
	_, err := m.cl.MemberAddAsLearner(ctx, []string{"http://" + peerAddr})
	return err
}

// RemoveMember removes the member named name, or whose peer URL is
// peerAddr's (a learner that has not started yet has no name).
func (m *Member) RemoveMember(ctx context.Context, name, peerAddr string) error {
	list, err := m.cl.MemberList(ctx)
	if err != nil {
		return err
	}
	for _, mb := range list.Members {
		if mb.Name == name || slices.Contains(mb.PeerURLs, "http://"+peerAddr) {
			_, err := m.cl.MemberRemove(ctx, mb.ID)
			return err
		}
	}
	return fmt.Errorf("etcd: no member %s at %s", name, peerAddr)
}
