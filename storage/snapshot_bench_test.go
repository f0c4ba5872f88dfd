package storage

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// BenchmarkSnapshotInstall moves a state of keys of 1 KiB from one state
// machine to a fresh one, as a new member catches up: the sender's
// chunks, the receiver's staging and its install. It reports each
// phase's live data per second (MB/s of keys and values), the figure of
// issue 27's catch-up target.
func BenchmarkSnapshotInstall(b *testing.B) {
	for _, keys := range []int{1 << 14, 1 << 16} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			from := openTestSM(b, nil, Options{})
			value := strings.Repeat("v", 1000)
			for i := 0; i < keys; i += 100 {
				var ops []command.Op
				for j := i; j < min(i+100, keys); j++ {
					ops = append(ops, putOp(fmt.Sprintf("key/%08d", j), value))
				}
				from.txn(command.Txn{Then: ops})
			}
			live := float64(keys * (12 + 1000))
			var read, stage, inst time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				to := openTestSM(b, nil, Options{})
				// A reader's Close releases its Pebble snapshot: one each.
				snap, err := from.snapshot()
				require.NoError(b, err)
				index, term := snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()
				b.StartTimer()
				r, ok := from.OpenSnapshot(index)
				require.True(b, ok)
				t0 := time.Now()
				chunk, err := r.Next()
				require.NoError(b, err)
				read += time.Since(t0)
				for seq := 0; ; seq++ {
					t0 := time.Now()
					next, err := r.Next()
					last := errors.Is(err, io.EOF)
					if !last {
						require.NoError(b, err)
					}
					t1 := time.Now()
					require.NoError(b, to.StageChunk(index, term, seq, chunk, last))
					read, stage = read+t1.Sub(t0), stage+time.Since(t1)
					if last {
						break
					}
					chunk = next
				}
				require.NoError(b, r.Close())
				t0 = time.Now()
				pending, err := to.prepareInstall(snap)
				require.NoError(b, err)
				require.NoError(b, pending.commit())
				to.afterInstall(snap)
				inst += time.Since(t0)
			}
			n := float64(b.N)
			b.ReportMetric(live/1e6/(read.Seconds()/n), "read-MB/s")
			b.ReportMetric(live/1e6/(stage.Seconds()/n), "stage-MB/s")
			b.ReportMetric(live/1e6/(inst.Seconds()/n), "install-MB/s")
			b.ReportMetric(live/1e6/((read+stage+inst).Seconds()/n), "MB/s")
		})
	}
}
