package storage

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestProposerTableDeterminism applies one random log of exactly-once
// commands (members' and clients' proposers, resends, resolves, stale
// copies, idempotency keys, floors that trail, jump and even pass their
// own sequence) to three state machines with small table bounds, each
// cutting it into batches differently and one restarting between them,
// and requires the same results, the same stored records and the same
// table: a restarted member must hold exactly what the others hold.
func TestProposerTableDeterminism(t *testing.T) {
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
					t.Logf("reproduce with: go test ./storage -run TestProposerTableDeterminism -sm.seed %d", s)
				}
			})
			proposerDeterminismRun(t, s, 3000)
		})
	}
}

func proposerDeterminismRun(t *testing.T, seed uint64, n int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	ents, probes := randomProposerLog(t, rng, n)
	opts := Options{ProposerRetainEntries: 700, MaxResultsPerProposer: 6, MaxProposersPerOwner: 3, MaxProposers: 6}

	var runs [3]struct {
		ts      *testSM
		out     []Applied
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
				size = 1 + rng.IntN(64)
			case 2:
				size = 1 + rng.IntN(8)
			}
			hi := min(lo+size, len(ents))
			out, err := r.ts.Apply(ents[lo:hi], nil)
			require.NoError(t, err)
			r.out = append(r.out, out.Results...)
			lo = hi
			if i == 2 && rng.IntN(30) == 0 {
				r.ts.reopen()
				r.reopens++
			}
		}
	}
	want := &runs[0]
	wantProbes := probeTable(want.ts, probes)
	for _, r := range runs[1:] {
		require.Equal(t, want.out, r.out)
		require.Equal(t, want.ts.dump(), r.ts.dump())
		require.Equal(t, want.ts.ProposerStats(), r.ts.ProposerStats())
		require.Equal(t, wantProbes, probeTable(r.ts, probes))
	}
	// And once more after a restart of the first.
	st := want.ts.ProposerStats()
	want.ts.reopen()
	require.Equal(t, st, want.ts.ProposerStats())
	require.Equal(t, wantProbes, probeTable(want.ts, probes))

	statuses := map[command.Status]int{}
	repeats := 0
	for _, a := range want.out {
		statuses[a.Result.Status]++
		if a.Result.Repeat {
			repeats++
		}
	}
	t.Logf("statuses %v, %d repeats, table %+v, %d reopens", statuses, repeats, st, runs[2].reopens)
}

// randomProposerLog makes n entries of exactly-once commands, and the
// proposers (with sequence numbers) worth probing afterwards.
func randomProposerLog(t *testing.T, rng *rand.Rand, n int) ([]*pb.Entry, []command.Proposer) {
	type prop struct {
		owner, key string
		id         uint64
		seq, floor uint64
		sent       []*command.Command // what it sent, for resends
	}
	var props []*prop
	newProp := func() *prop {
		p := &prop{id: rng.Uint64N(1 << 20)}
		switch rng.IntN(4) {
		case 0:
			p.owner = fmt.Sprintf("client:c%d", rng.IntN(3))
		case 1:
			p.owner = fmt.Sprintf("client:c%d", rng.IntN(3))
			p.key = fmt.Sprintf("key-%d", rng.IntN(20))
		}
		props = append(props, p)
		return p
	}
	keys := []string{"a", "b", "c", "p/1", "p/2"}
	ents := make([]*pb.Entry, n)
	for i := range ents {
		idx := uint64(i + 1)
		e := &pb.Entry{Index: new(idx), Term: new(uint64(1))}
		ents[i] = e
		if rng.IntN(10) == 0 {
			continue // empty: moves the index towards retirement
		}
		var p *prop
		if len(props) == 0 || rng.IntN(12) == 0 {
			p = newProp()
		} else {
			// Mostly the recent proposers, so the old ones idle and retire.
			p = props[max(0, len(props)-1-rng.IntN(min(len(props), 8)))]
		}
		var c *command.Command
		switch r := rng.IntN(100); {
		case r < 15 && len(p.sent) > 0: // a resend of something it sent
			c = p.sent[rng.IntN(len(p.sent))]
		case r < 22 && p.key == "": // a resolve of something maybe sent
			c = &command.Command{Kind: command.KindResolve, Proposer: &command.Proposer{
				Owner: p.owner, ID: p.id, Seq: max(1, p.seq+uint64(rng.IntN(3))-min(p.seq, uint64(rng.IntN(4)))), Born: idx - 1}}
			if rng.IntN(8) == 0 { // anything a client may ask after
				c.Proposer.Seq = math.MaxUint64 - uint64(rng.IntN(2))
			}
		default:
			ops := []command.Op{{Type: command.OpPut, Key: keys[rng.IntN(len(keys))], Value: []byte(fmt.Sprint(idx))}}
			if rng.IntN(3) == 0 {
				ops = append(ops, getPrefix("p/"))
			}
			if rng.IntN(6) == 0 {
				ops = []command.Op{delOp(keys[rng.IntN(len(keys))])}
			}
			c = txnCmd(command.Txn{Then: ops})
			if rng.IntN(10) == 0 {
				c = &command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9}}
			}
			pr := &command.Proposer{Owner: p.owner, ID: p.id, Key: p.key, Born: idx - 1}
			if p.key == "" {
				if rng.IntN(8) > 0 || p.seq == 0 {
					p.seq++ // sometimes a number is skipped: a call that never reached the log
				}
				p.seq += uint64(rng.IntN(2))
				switch f := rng.IntN(20); {
				case f == 0: // past its own sequence (only a broken or hostile proposer)
					p.floor = p.seq + 1 + uint64(rng.IntN(3))
				case f < 3: // stale: below what it said before
					pr.Floor = p.floor - min(p.floor, uint64(rng.IntN(3)))
				case f < 12: // moves up, trailing the sequence
					p.floor = max(p.floor, p.seq-min(p.seq, uint64(rng.IntN(5))))
				}
				pr.Seq = p.seq
				if pr.Floor == 0 {
					pr.Floor = p.floor
				}
			}
			c.Proposer = pr
			p.sent = append(p.sent, c)
			if len(p.sent) > 10 {
				p.sent = p.sent[1:]
			}
		}
		data, err := command.Encode(c)
		require.NoError(t, err)
		e.Data = data
	}
	var probes []command.Proposer
	for _, p := range props {
		if p.key != "" {
			probes = append(probes, command.Proposer{Owner: p.owner, Key: p.key, Born: 1})
			continue
		}
		for seq := p.seq - min(p.seq, 12); seq <= p.seq+1; seq++ {
			probes = append(probes, command.Proposer{Owner: p.owner, ID: p.id, Seq: seq, Born: 1},
				command.Proposer{Owner: p.owner, ID: p.id, Seq: seq, Born: uint64(n)})
		}
	}
	return ents, probes
}
