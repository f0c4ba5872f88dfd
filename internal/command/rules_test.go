package command

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDuplicateWrite is etcd's rule: puts are unique and fall under no
// delete of the branch; deletes may overlap.
func TestDuplicateWrite(t *testing.T) {
	put := func(k string) Op { return Op{Type: OpPut, Key: k} }
	del := func(k string) Op { return Op{Type: OpDelete, Key: k} }
	delPrefix := func(k string) Op { return Op{Type: OpDelete, Key: k, Prefix: true} }
	get := func(k string) Op { return Op{Type: OpGet, Key: k} }
	for name, c := range map[string]struct {
		ops []Op
		dup string
	}{
		"two puts":                {[]Op{put("a"), get("a"), put("a")}, "a"},
		"put, delete":             {[]Op{put("a"), del("a")}, "a"},
		"delete, put":             {[]Op{del("b"), put("a"), del("a")}, "a"},
		"put under a prefix":      {[]Op{delPrefix("a/"), put("a/x")}, "a/x"},
		"put at the prefix":       {[]Op{put("a/"), delPrefix("a/")}, "a/"},
		"prefix covered by other": {[]Op{delPrefix("a/b"), delPrefix("a"), put("a/c")}, "a/c"},
		"not the greatest prefix": {[]Op{delPrefix("a"), delPrefix("ab0"), put("ab1")}, "ab1"},
		"everything":              {[]Op{delPrefix(""), put("z")}, "z"},
		"distinct puts":           {[]Op{put("a"), put("b"), put("ab")}, ""},
		"overlapping deletes":     {[]Op{del("a"), del("a"), delPrefix("a"), delPrefix("")}, ""},
		"put beside a prefix":     {[]Op{delPrefix("a/"), put("a"), put("b/x"), put("a0")}, ""},
		"gets":                    {[]Op{get("a"), get("a"), {Type: OpGet, Key: "a", Prefix: true}, put("a")}, ""},
		"none":                    {nil, ""},
	} {
		key, dup := DuplicateWrite(c.ops)
		require.Equal(t, c.dup != "", dup, name)
		require.Equal(t, c.dup, key, name)
	}
}

func TestTxnReadOnly(t *testing.T) {
	require.True(t, (&Txn{}).ReadOnly())
	require.True(t, (&Txn{Then: []Op{{Type: OpGet, Key: "a"}}, Else: []Op{{Type: OpGet, Key: "", Prefix: true}}}).ReadOnly())
	require.False(t, (&Txn{Else: []Op{{Type: OpDelete, Key: "a"}}}).ReadOnly())
	require.False(t, (&Txn{Then: []Op{{Type: 0, Key: "a"}}}).ReadOnly(), "an unknown op is not a read")
	require.True(t, (&Txn{Else: []Op{{Type: OpGet, Key: "a", Prefix: true}}}).PrefixReads())
	require.False(t, (&Txn{Then: []Op{{Type: OpGet, Key: "a"}, {Type: OpDelete, Key: "b", Prefix: true}}}).PrefixReads())
}

// The pairwise check of small branches and the sorted one of large
// branches agree.
func TestDuplicateWriteBothWays(t *testing.T) {
	s := seed(t)
	r := rand.New(rand.NewPCG(s, s))
	keys := []string{"", "a", "a/", "a/b", "a/c", "ab", "b", "b/x"}
	for i := range 20000 {
		ops := make([]Op, 1+r.IntN(12))
		for j := range ops {
			ops[j] = Op{Type: OpType(1 + r.IntN(3)), Key: keys[r.IntN(len(keys))], Prefix: r.IntN(3) == 0}
			if ops[j].Type == OpPut {
				ops[j].Prefix = false
			}
		}
		_, small := duplicateWriteSmall(ops)
		_, sorted := duplicateWriteSorted(ops)
		require.Equal(t, small, sorted, "seed %d, case %d: %+v", s, i, ops)
	}
}
