package storage

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

var smSeed = flag.Uint64("sm.seed", 0, "seed for TestStateMachineDeterminism (0 = from the clock)")

// TestStateMachineDeterminism applies one random log to three state
// machines, each cutting it into batches differently (one also restarting
// between batches), and requires identical results, changes and state:
// what every member of a cell relies on.
func TestStateMachineDeterminism(t *testing.T) {
	t.Parallel()
	seed := *smSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	for i := range uint64(3) {
		s := seed + i
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("reproduce with: go test ./storage -run TestStateMachineDeterminism -sm.seed %d", s)
				}
			})
			determinismRun(t, s, 400)
		})
	}
}

func determinismRun(t *testing.T, seed uint64, n int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	ents := randomLog(t, rng, n)
	opts := Options{HistoryRevisions: 25, QuotaBytes: 60}

	var runs [3]struct {
		ts      *testSM
		out     ApplyOutput
		reopens int
	}
	for i := range runs {
		runs[i].ts = openTestSM(t, nil, opts)
	}
	for i := range runs {
		r := &runs[i]
		for lo := 0; lo < len(ents); {
			size := 1
			switch i {
			case 1:
				size = 1 + rng.IntN(40)
			case 2:
				size = 1 + rng.IntN(8)
			}
			hi := min(lo+size, len(ents))
			out, err := r.ts.Apply(ents[lo:hi], nil)
			require.NoError(t, err)
			r.out.Results = append(r.out.Results, out.Results...)
			r.out.Changes = append(r.out.Changes, out.Changes...)
			lo = hi
			if i == 2 && rng.IntN(25) == 0 {
				r.ts.reopen()
				r.reopens++
			}
		}
	}
	want := runs[0]
	require.EqualValues(t, n, want.ts.AppliedIndex())
	for _, r := range runs[1:] {
		require.Equal(t, want.ts.dump(), r.ts.dump())
		require.Equal(t, want.out.Results, r.out.Results)
		require.Equal(t, want.out.Changes, r.out.Changes)
		require.Equal(t, want.ts.cur, r.ts.cur)
	}
	// The changes Apply reported are the history's.
	hist, err := want.ts.History(want.ts.OldestRevision()-1, 0)
	require.NoError(t, err)
	reported := want.out.Changes[len(want.out.Changes)-len(hist):]
	require.Equal(t, len(hist), len(reported))
	for i := range hist {
		require.Equal(t, reported[i].Rev, hist[i].Rev)
		require.Equal(t, len(reported[i].Events), len(hist[i].Events))
		for j := range hist[i].Events {
			requireSameKV(t, reported[i].Events[j].KV, hist[i].Events[j].KV)
		}
	}
	// The log exercised what it is meant to.
	statuses := map[command.Status]int{}
	for _, a := range want.out.Results {
		statuses[a.Result.Status]++
	}
	t.Logf("statuses %v, %d revisions, %d reopens", statuses, want.ts.Revision(), runs[2].reopens)
}

// randomLog makes n entries: mostly transactions over a few keys, with
// sessions coming and going, and the odd empty, conf change or malformed
// entry.
func randomLog(t *testing.T, rng *rand.Rand, n int) []*pb.Entry {
	keys := []string{"a", "b", "p/1", "p/2", "p/3", "q/1", "locks/x", "locks/y"}
	prefixes := []string{"p/", "q/", "locks/", ""}
	var sessions []int64
	pick := func() string { return keys[rng.IntN(len(keys))] }
	value := func() []byte {
		if rng.IntN(8) == 0 {
			return nil
		}
		return []byte(fmt.Sprint(rng.Uint32() >> rng.IntN(32)))
	}
	session := func() int64 {
		if len(sessions) == 0 || rng.IntN(6) == 0 {
			return rng.Int64N(int64(n)) // usually no such session
		}
		return sessions[rng.IntN(len(sessions))]
	}
	targets := []command.CompareTarget{command.TargetVersion, command.TargetValue, command.TargetCreateRev, command.TargetModRev, command.TargetSession}
	compares := func() []command.Compare {
		var out []command.Compare
		for range rng.IntN(3) {
			out = append(out, command.Compare{
				Key: pick(), Target: targets[rng.IntN(len(targets))],
				Op: command.CompareOp(1 + rng.IntN(4)), Int: rng.Int64N(5), Value: value(),
			})
		}
		return out
	}
	// ops makes a branch; at depth 0 and 1 one op in eight is a nested
	// transaction (format 7).
	var ops func(depth int) []command.Op
	ops = func(depth int) []command.Op {
		out := make([]command.Op, rng.IntN(4))
		for i := range out {
			if depth < 2 && rng.IntN(8) == 0 {
				out[i] = command.Op{Type: command.OpTxn, Txn: &command.Txn{If: compares(), Then: ops(depth + 1), Else: ops(depth + 1)}}
				continue
			}
			switch rng.IntN(7) {
			case 0:
				out[i] = getOp(pick())
			case 1:
				out[i] = getPrefix(prefixes[rng.IntN(len(prefixes))])
			case 2:
				out[i] = delOp(pick())
			case 3:
				out[i] = delPrefix(prefixes[rng.IntN(len(prefixes)-1)])
			case 4:
				out[i] = command.Op{Type: command.OpPut, Key: pick(), Value: value(), Session: session()}
			default:
				out[i] = command.Op{Type: command.OpPut, Key: pick(), Value: value()}
			}
		}
		return out
	}

	ents := make([]*pb.Entry, n)
	for i := range ents {
		idx := uint64(i + 1)
		e := &pb.Entry{Index: new(idx), Term: new(1 + idx/100)}
		ents[i] = e
		var c *command.Command
		switch r := rng.IntN(100); {
		case r < 3:
			continue // empty
		case r < 5:
			e.Type = new(pb.EntryConfChangeV2)
			e.Data = []byte{0x0a, 0x00}
			continue
		case r < 6:
			e.Data = []byte{command.Version, 0xc1}
			continue
		case r < 14:
			c = &command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: rng.Int64N(1e10) + 1}}
			sessions = append(sessions, int64(idx))
		case r < 20:
			c = &command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: session()}}
		case r < 22:
			c = &command.Command{Kind: command.KindNoop}
		default:
			c = txnCmd(command.Txn{Then: ops(0), Else: ops(0), If: compares()})
		}
		c.ID = rng.Uint64()
		data, err := command.Encode(c)
		require.NoError(t, err)
		e.Data = data
	}
	return ents
}
