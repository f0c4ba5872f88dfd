package storage

import (
	"fmt"
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// BenchmarkApply measures Apply of single-put transactions with 100-byte
// values, one Apply per batch (an op is one batch; entry/op is per put).
func BenchmarkApply(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ts := openTestSM(b, nil, Options{})
			const keys = 10_000
			value := make([]byte, 100)
			datas := make([][]byte, keys)
			for i := range datas {
				data, err := command.Encode(txnCmd(command.Txn{Then: []command.Op{
					{Type: command.OpPut, Key: fmt.Sprintf("bench/key/%06d", i), Value: value},
				}}))
				require.NoError(b, err)
				datas[i] = data
			}
			ents := make([]*pb.Entry, batch)
			for i := range ents {
				ents[i] = &pb.Entry{Index: new(uint64(0)), Term: new(uint64(1))}
			}
			next := uint64(1)
			b.SetBytes(int64(batch * len(value)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				for _, e := range ents {
					*e.Index = next
					e.Data = datas[next%keys]
					next++
				}
				if _, err := ts.Apply(ents, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(int(next-1)), "ns/entry")
		})
	}
}

// BenchmarkGet measures a point read of one of 10,000 keys.
func BenchmarkGet(b *testing.B) {
	ts := openTestSM(b, nil, Options{})
	const keys = 10_000
	value := make([]byte, 100)
	var cmds []*command.Command
	for i := range keys {
		cmds = append(cmds, txnCmd(command.Txn{Then: []command.Op{
			{Type: command.OpPut, Key: fmt.Sprintf("bench/key/%06d", i), Value: value},
		}}))
		if len(cmds) == 500 {
			ts.apply(cmds...)
			cmds = cmds[:0]
		}
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("bench/key/%06d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, ok, err := ts.Get(names[i%keys]); err != nil || !ok {
			b.Fatal(ok, err)
		}
		i += 7
	}
}
