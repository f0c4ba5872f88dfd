package storage

import (
	"fmt"
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// BenchmarkApplyLockCycle measures what a Mutex costs the state machine:
// one transaction that writes a fresh ephemeral queue key and reads the
// queue prefix, then one that deletes the key. An op is one such cycle.
// prior is how many cycles ran before the timer starts: the cost of a
// cycle must not grow with the cycles before it (each leaves a deleted
// key behind in Pebble).
func BenchmarkApplyLockCycle(b *testing.B) {
	for _, c := range []struct {
		prior int
		limit int64 // the acquisition's read limit: 0 as before format 6, 4 MiB as a member proposes it
	}{{0, 0}, {0, 4 << 20}, {10_000, 0}, {10_000, 4 << 20}, {30_000, 0}, {30_000, 4 << 20}} {
		prior := c.prior
		b.Run(fmt.Sprintf("prior=%d/readlimit=%d", prior, c.limit), func(b *testing.B) {
			ts := openTestSM(b, nil, Options{})
			sid := ts.newSession()
			// Another lock's holder, so the prefix read has company.
			ts.txn(command.Txn{Then: []command.Op{ephemeralPut("locks/other/0", "", sid)}})
			const prefix = "locks/bench/"
			ent := []*pb.Entry{{Index: new(uint64(0)), Term: new(uint64(1))}}
			n := 0
			cycle := func() {
				key := fmt.Sprintf("%s%016x", prefix, n)
				n++
				for _, t := range []command.Txn{
					{Then: []command.Op{ephemeralPut(key, "", sid), getPrefix(prefix)}, ReadLimit: c.limit},
					{Then: []command.Op{delOp(key)}},
				} {
					data, err := command.Encode(txnCmd(t))
					require.NoError(b, err)
					*ent[0].Index = ts.AppliedIndex() + 1
					ent[0].Data = data
					out, err := ts.Apply(ent, nil)
					if err != nil || len(out.Results) != 1 || out.Results[0].Result.Status != command.StatusOK {
						b.Fatal(out, err)
					}
				}
			}
			for range prior {
				cycle()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				cycle()
			}
		})
	}
}
