package mpcheck

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// TestCheckAcceptsValid walks every msgpack type our decoders could meet
// (old logs included): the check must accept them all, and refuse every
// one cut short.
func TestCheckAcceptsValid(t *testing.T) {
	for _, v := range []any{
		nil, true, false, 0, 1, -1, -33, 127, 128, 255, 256, 65535, 65536, math.MaxInt64, math.MinInt64,
		uint64(math.MaxUint64), float32(1.5), 2.5, "", "k", strings.Repeat("s", 31), strings.Repeat("s", 32),
		strings.Repeat("s", 256), strings.Repeat("s", 65536), []byte{}, []byte("b"), make([]byte, 256), make([]byte, 65536),
		[]any{}, make([]any, 16), make([]any, 65536), map[string]any{}, map[string]any{"a": []any{1, "x", map[string]any{"b": nil}}},
		time.Unix(1, 2), time.Unix(1<<40, 0), time.Unix(1<<40, 5),
	} {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, Check(b), "%T %x", v, b)
		for i := range len(b) {
			require.Error(t, Check(b[:i]), "%T cut at %d", v, i)
		}
	}
	big := make(map[string]int, 20)
	for i := range 20 {
		big[fmt.Sprint(i)] = i
	}
	for _, v := range []any{big, []any{big, big}} {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, Check(b))
	}
	require.Error(t, Check([]byte{0xc1}))
}
