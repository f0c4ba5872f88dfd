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

// BenchmarkApplyOnce compares BenchmarkApply's puts without a proposer
// and as members and clients now propose them, naming their proposer:
// the state machine then also keeps each result and moves the proposer's
// floor (proposers.go). The commands are encoded outside the timer.
func BenchmarkApplyOnce(b *testing.B) {
	for _, batch := range []int{1, 64} {
		for _, once := range []bool{false, true} {
			b.Run(fmt.Sprintf("batch=%d/proposer=%v", batch, once), func(b *testing.B) { benchApplyOnce(b, batch, once) })
		}
	}
}

func benchApplyOnce(b *testing.B, batch int, once bool) {
	ts := openTestSM(b, nil, Options{})
	value := make([]byte, 100)
	ents := make([]*pb.Entry, batch)
	for i := range ents {
		ents[i] = &pb.Entry{Index: new(uint64(0)), Term: new(uint64(1))}
	}
	next := uint64(1)
	b.SetBytes(int64(batch * len(value)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		for _, e := range ents {
			*e.Index = next
			c := txnCmd(command.Txn{Then: []command.Op{
				{Type: command.OpPut, Key: fmt.Sprintf("bench/key/%06d", next%10_000), Value: value},
			}})
			if once {
				// 64 callers in flight: the floor trails by 64.
				c.Proposer = &command.Proposer{ID: 1, Seq: next, Floor: max(1, next-64), Born: next - 1}
			}
			data, err := command.Encode(c)
			require.NoError(b, err)
			e.Data = data
			next++
		}
		b.StartTimer()
		if _, err := ts.Apply(ents, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(int(next-1)), "ns/entry")
}
