package storage

import (
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

func TestSeedKeepsRevisionsAcrossReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
	require.NoError(t, err)
	cs := &pb.ConfState{Voters: []uint64{1}}
	kvs := []command.KV{
		{Key: "a", Value: []byte("1"), Version: 3, CreateRev: 2, ModRev: 9},
		{Key: "b", Value: []byte("22"), Version: 1, CreateRev: 10, ModRev: 10},
	}
	require.NoError(t, s.Seed(cs, []MemberInfo{{ID: 1, Name: "a"}}, kvs, 12))
	require.ErrorIs(t, s.Seed(cs, nil, nil, 1), ErrNotNew)
	require.NoError(t, s.Close())

	s, err = Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
	require.NoError(t, err)
	defer s.Close()
	require.False(t, s.IsNew())
	sm := s.StateMachine()
	require.Equal(t, int64(12), sm.Revision())
	require.Equal(t, int64(13), sm.OldestRevision())
	got, rev, err := sm.List("")
	require.NoError(t, err)
	require.Equal(t, int64(12), rev)
	require.Equal(t, kvs, got)
	require.Equal(t, []uint64{1}, sm.ConfState().GetVoters())
}

func TestSeedRefusesSessionKeysAndImpossibleRevisions(t *testing.T) {
	t.Parallel()
	for name, kv := range map[string]command.KV{
		"session":         {Key: "a", Version: 1, CreateRev: 1, ModRev: 1, Session: 5},
		"after revision":  {Key: "a", Version: 1, CreateRev: 1, ModRev: 20},
		"created later":   {Key: "a", Version: 1, CreateRev: 3, ModRev: 2},
		"without version": {Key: "a", CreateRev: 1, ModRev: 1},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(Options{})
			require.NoError(t, err)
			defer s.Close()
			require.Error(t, s.Seed(&pb.ConfState{Voters: []uint64{1}}, nil, []command.KV{kv}, 10))
			require.True(t, s.IsNew(), "a refused seed writes nothing")
		})
	}
}
