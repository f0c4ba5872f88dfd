package storage

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// BenchmarkApplyOncePuts measures what exactly-once costs the state
// machine without Raft: batches of single-put transactions (100-byte
// values over 10,000 keys) as the cell proposes them, each batch applied
// and its image committed to Pebble (as a member's store configures it,
// on an in-memory disk). An op is one batch. Shapes:
//   - none: no proposer (the commands as before exactly-once);
//   - member: one member's proposer with 64 calls in flight, so its floor
//     trails its sequence by 64 (what BenchmarkPut's 64 callers make);
//   - clients: 64 clients, each its own proposer and owner with one call
//     in flight (floor = sequence), round robin;
//   - many: the same with 4,096 clients.
//
// The commands are encoded outside the timer, a chunk at a time; the
// image writer is drained inside it, so Pebble's commits count. Besides
// ns/entry it reports cpu-ns/entry: the process's CPU time (every
// goroutine: Apply, the image writer, Pebble's flushes and compactions,
// the GC) per entry within the timed sections; and apply-ns/entry, the
// time spent in Apply itself (the apply path, without the image's
// commits, flushes and compactions but for what they take from it).
func BenchmarkApplyOncePuts(b *testing.B) {
	for _, batch := range []int{8, 64} {
		for _, shape := range []string{"none", "member", "clients", "many"} {
			b.Run(fmt.Sprintf("batch=%d/shape=%s", batch, shape), func(b *testing.B) { benchApplyOncePuts(b, batch, shape) })
		}
	}
}

func benchApplyOncePuts(b *testing.B, batch int, shape string) {
	// A store's state machine, on an in-memory disk: Pebble as a member
	// configures it.
	st, err := Open(Options{})
	require.NoError(b, err)
	defer func() { require.NoError(b, st.Close()) }()
	ts := st.StateMachine()
	value := make([]byte, 100)
	const clients, manyClients, inFlight, keys = 64, 4096, 64, 10_000
	clientSeq := make([]uint64, manyClients)
	next := uint64(1) // the next entry's index
	encode := func(idx uint64) []byte {
		c := txnCmd(command.Txn{Then: []command.Op{
			{Type: command.OpPut, Key: fmt.Sprintf("bench/key/%06d", idx%keys), Value: value},
		}})
		switch shape {
		case "member":
			c.Proposer = &command.Proposer{ID: 1, Seq: idx, Floor: max(idx, inFlight) - inFlight + 1, Born: idx - 1}
		case "clients", "many":
			n := idx % clients
			if shape == "many" {
				n = idx % manyClients
			}
			clientSeq[n]++
			s := clientSeq[n]
			c.Proposer = &command.Proposer{Owner: fmt.Sprintf("client:bench-%04d", n), ID: 1000 + n, Seq: s, Floor: s, Born: idx - 1}
		}
		data, err := command.Encode(c)
		require.NoError(b, err)
		return data
	}
	// A chunk of batches is encoded at a time, with the timer stopped.
	const chunkEntries = 2048
	chunk := max(1, chunkEntries/batch)
	ents := make([][]*pb.Entry, chunk)
	for i := range ents {
		ents[i] = make([]*pb.Entry, batch)
	}
	fill := func() {
		for _, bat := range ents {
			for j := range bat {
				bat[j] = &pb.Entry{Index: new(next), Term: new(uint64(1)), Data: encode(next)}
				next++
			}
		}
	}
	var cpu, inApply time.Duration
	cpuNow := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	applied, used := 0, chunk
	var start time.Duration
	b.SetBytes(int64(batch * len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if used == chunk {
			b.StopTimer()
			fill()
			used = 0
			b.StartTimer()
			start = cpuNow()
		}
		t0 := time.Now()
		out, err := ts.Apply(ents[used], nil)
		inApply += time.Since(t0)
		if err != nil || len(out.Results) != batch || out.Results[0].Result.Status != command.StatusOK {
			b.Fatal(out.Results, err)
		}
		used++
		applied += batch
		if used == chunk {
			require.NoError(b, ts.drainImage())
			cpu += cpuNow() - start
		}
	}
	if used < chunk {
		// The last chunk's apply is timed; its image commits mostly are.
		cpu += cpuNow() - start
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(applied), "ns/entry")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(applied), "cpu-ns/entry")
	b.ReportMetric(float64(inApply.Nanoseconds())/float64(applied), "apply-ns/entry")
}
