package storage

import (
	"encoding/binary"
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

func TestHistoryKeepsPreviousState(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("k", "v1")
	ts.put("k", "v2")
	ts.txn(command.Txn{Then: []command.Op{delOp("k")}})
	hist, err := ts.History(0, 0)
	require.NoError(t, err)
	require.Len(t, hist, 3)
	require.Nil(t, hist[0].Events[0].Prev, "a create has no previous state")
	require.Equal(t, &command.KV{Key: "k", Value: []byte("v1"), Version: 1, CreateRev: 1, ModRev: 1}, hist[1].Events[0].Prev)
	del := hist[2].Events[0]
	require.Equal(t, EventDelete, del.Type)
	require.Nil(t, del.KV.Value)
	require.Equal(t, []byte("v2"), del.Prev.Value)
	require.EqualValues(t, 2, del.Prev.ModRev)
}

// TestHistoryReadsFormat1 keeps records written before previous states
// were stored readable (invariant 10: upgrade one member at a time).
func TestHistoryReadsFormat1(t *testing.T) {
	t.Parallel()
	b := []byte{historyFormat1}
	b = binary.AppendUvarint(b, 1)
	b = append(b, byte(EventPut))
	b = binary.AppendUvarint(b, 1)
	b = append(b, 'k')
	b = binary.AppendUvarint(b, 1)
	b = append(b, 'v')
	for _, v := range []uint64{3, 2, 0} { // version, create rev, session
		b = binary.AppendUvarint(b, v)
	}
	evs, err := decodeHistoryRecord(9, b)
	require.NoError(t, err)
	require.Equal(t, []Event{{Type: EventPut, KV: command.KV{Key: "k", Value: []byte("v"), Version: 3, CreateRev: 2, ModRev: 9}}}, evs)
	_, err = decodeHistoryRecord(9, append([]byte{7}, b[1:]...))
	require.ErrorIs(t, err, ErrFormat)
}
