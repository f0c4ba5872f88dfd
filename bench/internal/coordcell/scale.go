package coordcell

import (
	"context"
	"errors"
	"fmt"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/bench/internal/cell"
)

var _ cell.Scaler = (*Member)(nil)

// PutBatch writes the keys in one transaction.
func (m *Member) PutBatch(ctx context.Context, keys []string, value []byte) error {
	ops := make([]coord.Op, len(keys))
	for i, k := range keys {
		ops[i] = coord.OpPut(k, value)
	}
	_, err := m.n.Txn(ctx).Then(ops...).Commit()
	return err
}

// DeleteBatch deletes the keys in one transaction.
func (m *Member) DeleteBatch(ctx context.Context, keys []string) error {
	ops := make([]coord.Op, len(keys))
	for i, k := range keys {
		ops[i] = coord.OpDelete(k)
	}
	_, err := m.n.Txn(ctx).Then(ops...).Commit()
	return err
}

// PutRev writes and returns the write's revision.
func (m *Member) PutRev(ctx context.Context, key string, value []byte) (int64, error) {
	kv, err := m.n.Put(ctx, key, value)
	return kv.ModRev, err
}

// ListPage lists one page with coord's Limit and After.
func (m *Member) ListPage(ctx context.Context, prefix, after string, limit int) (int, string, int64, error) {
	kvs, _, err := m.n.List(ctx, prefix, coord.Limit(limit), coord.After(after))
	if err != nil || len(kvs) == 0 {
		return 0, after, 0, err
	}
	var b int64
	for _, kv := range kvs {
		b += int64(len(kv.Key) + len(kv.Value))
	}
	return len(kvs), kvs[len(kvs)-1].Key, b, nil
}

// WatchFrom watches prefix after rev (FromRev).
func (m *Member) WatchFrom(ctx context.Context, prefix string, rev int64, fn func(rev int64)) (func() error, error) {
	w := m.n.Watch(ctx, prefix, coord.FromRev(rev))
	select {
	case <-w.Ready():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := w.Err(); err != nil {
		return nil, err
	}
	go func() {
		for ev := range w.Events() {
			if ev.Type != coord.EventProgress {
				fn(ev.Rev)
			}
		}
	}()
	return w.Err, nil
}

// QuotaRefused reports ErrQuotaExceeded.
func (m *Member) QuotaRefused(err error) bool { return errors.Is(err, coord.ErrQuotaExceeded) }

// ScaleStatus reads the member's status, and from its metrics (when its
// spec asked for them) the keyspace bytes and the live sessions.
func (m *Member) ScaleStatus(ctx context.Context) (cell.ScaleStatus, error) {
	st := m.n.Status()
	out := cell.ScaleStatus{Applied: st.Applied, Commit: st.Commit, Revision: st.Revision,
		Leader: st.Role == coord.RoleLeader, KeyspaceBytes: -1, DBBytes: -1, DBInUseBytes: -1, Sessions: -1}
	if m.reg == nil {
		return out, nil
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		return out, err
	}
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 0 || mf.GetMetric()[0].GetGauge() == nil {
			continue
		}
		v := int64(mf.GetMetric()[0].GetGauge().GetValue())
		switch mf.GetName() {
		case "coord_keyspace_bytes":
			out.KeyspaceBytes = v
		case "coord_sessions_alive":
			out.Sessions = v
		}
	}
	return out, nil
}

// AddLearner adds a learner (coord Node.AddLearner).
func (m *Member) AddLearner(ctx context.Context, name, peerAddr string) error {
	return m.n.Admin().AddLearner(ctx, name, peerAddr)
}

// RemoveMember removes a member (coord Node.RemoveMember).
func (m *Member) RemoveMember(ctx context.Context, name, _ string) error {
	if err := m.n.Admin().RemoveMember(ctx, name); err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

var _ cell.SegmentCounter = (*Member)(nil)

// SegmentCuts reads the log's segment counts from the member's metrics
// (coord_raft_log_segments_started_total and _filled_inline_total); its
// spec must have asked for them.
func (m *Member) SegmentCuts() (started, inline int64, err error) {
	if m.reg == nil {
		return 0, 0, errors.New("coord member: segment cuts need its metrics (cell.ScaleSpec.Metrics)")
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 0 || mf.GetMetric()[0].GetCounter() == nil {
			continue
		}
		v := int64(mf.GetMetric()[0].GetCounter().GetValue())
		switch mf.GetName() {
		case "coord_raft_log_segments_started_total":
			started, found = v, found+1
		case "coord_raft_log_segments_filled_inline_total":
			inline, found = v, found+1
		}
	}
	if found != 2 {
		return 0, 0, errors.New("coord member: no segment counts in its metrics")
	}
	return started, inline, nil
}
