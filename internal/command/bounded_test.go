package command

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// boundedByStruct is Bounded's rule read off a decoded command.
func boundedByStruct(c *Command) bool {
	if c.Kind == KindSessionEnd {
		return false
	}
	if c.Kind != KindTxn || c.Txn == nil {
		return true
	}
	if c.Txn.Nests() {
		return false // format 7 is not read: unbounded
	}
	prefixDelete := func(op Op) bool { return op.Type == OpDelete && op.Prefix }
	return !slices.ContainsFunc(c.Txn.Then, prefixDelete) && !slices.ContainsFunc(c.Txn.Else, prefixDelete)
}

func TestBounded(t *testing.T) {
	enc := func(c *Command) []byte {
		b, err := Encode(c)
		require.NoError(t, err)
		return b
	}
	require.True(t, Bounded(enc(putCommand())))
	require.True(t, Bounded(enc(lockCommand())), "a lock acquire reads its queue's prefix: bounded")
	require.True(t, Bounded(enc(&Command{Kind: KindNoop})))
	require.True(t, Bounded(enc(&Command{Kind: KindSessionCreate, Session: &Session{TTL: 5}})))
	require.False(t, Bounded(enc(&Command{Kind: KindSessionEnd, Session: &Session{ID: 3}})))
	delPrefix := &Command{Kind: KindTxn, Txn: &Txn{
		If:   []Compare{{Key: "a", Target: TargetVersion, Op: Equal}},
		Then: []Op{{Type: OpPut, Key: "a", Value: []byte("v")}},
		Else: []Op{{Type: OpDelete, Key: "logs/", Prefix: true}},
	}}
	require.False(t, Bounded(enc(delPrefix)), "a prefix delete in either branch")
	require.False(t, Bounded(encodeV1(t, putCommand())), "format 1 is not read: unbounded")
	b := enc(lockCommand())
	for i := range len(b) {
		require.False(t, Bounded(b[:i]), "cut at %d", i)
	}
}

func BenchmarkBounded(b *testing.B) {
	data, err := Encode(lockCommand())
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if !Bounded(data) {
			b.Fatal("lock acquire unbounded")
		}
	}
}
