package coord_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
)

var soak = flag.Duration("soak", 0, "run the fault soak tests for this long (0 = the short default run); COORD_SOAK does the same")

// soakDuration is how long fault tests run: a few seconds by default,
// longer with -soak=5m or COORD_SOAK=5m.
func soakDuration(short time.Duration) time.Duration {
	if *soak > 0 {
		return *soak
	}
	if d, err := time.ParseDuration(os.Getenv("COORD_SOAK")); err == nil && d > 0 {
		return d
	}
	return short
}

// Operations of the register model: one register per key, holding a
// value and its version.
type opKind int

const (
	opPut opKind = iota
	opGet
	opCAS
)

type regInput struct {
	kind    opKind
	key     string
	value   string
	version int64 // CAS: the expected version
}

type regOutput struct {
	ambiguous bool  // the write's outcome is unknown
	err       error // why, when ambiguous
	found     bool  // get: the key existed
	value     string
	version   int64 // get: the version read
	ok        bool  // cas: it succeeded
}

type register struct {
	value   string
	version int64
}

var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(regInput).key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return register{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(register), input.(regInput), output.(regOutput)
		switch in.kind {
		case opPut:
			return true, register{value: in.value, version: s.version + 1}
		case opGet:
			if s.version == 0 {
				return !out.found, s
			}
			return out.found && out.value == s.value && out.version == s.version, s
		default: // opCAS
			matches := s.version == in.version
			next := s
			if matches {
				next = register{value: in.value, version: s.version + 1}
			}
			if out.ambiguous {
				// Whatever happened is what the state dictates.
				return true, next
			}
			return out.ok == matches, next
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch in.kind {
		case opPut:
			return fmt.Sprintf("put(%s, %s) amb=%v", in.key, in.value, out.ambiguous)
		case opGet:
			return fmt.Sprintf("get(%s) -> %v %s v%d", in.key, out.found, out.value, out.version)
		default:
			return fmt.Sprintf("cas(%s, v%d, %s) -> %v amb=%v", in.key, in.version, in.value, out.ok, out.ambiguous)
		}
	},
}

// TestLinearizableUnderFaults runs concurrent clients doing puts, gets
// and compare-and-sets on a few keys of a 5-member cell while a nemesis
// partitions, isolates, crashes and restarts members at random; the
// history must be linearizable. Failed operations that certainly did not
// happen (ErrNoQuorum) are left out; ambiguous writes stay in with an
// open end, as Jepsen does.
func TestLinearizableUnderFaults(t *testing.T) {
	t.Parallel()
	seed := rand.Int64()
	t.Logf("seed %d", seed)
	c := coordtest.NewCluster(t, 5, coordtest.WithSeed(seed))
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	duration := soakDuration(2 * time.Second) // the simulator (sim/) runs these faults at length
	// A few hot keys make conflicts likely; longer runs spread over more
	// keys so each key's history stays small enough for the checker (a
	// minute runs over 200,000 operations in memory).
	nkeys := 3
	if duration > 4*time.Second {
		nkeys += int(duration / (250 * time.Millisecond))
	}
	var keys []string
	for i := range nkeys {
		keys = append(keys, fmt.Sprintf("key%d", i))
	}
	const clients = 6

	start := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
	)
	record := func(client int, in regInput, out regOutput, call, ret time.Time) {
		mu.Lock()
		defer mu.Unlock()
		r := ret.Sub(start).Nanoseconds()
		if out.ambiguous {
			r = math.MaxInt64
		}
		history = append(history, porcupine.Operation{
			ClientId: client, Input: in, Output: out, Call: call.Sub(start).Nanoseconds(), Return: r,
		})
	}

	c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	for cl := range clients {
		crng := rand.New(rand.NewPCG(uint64(seed), uint64(cl)+100))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				node := c.Node(crng.IntN(c.Size()))
				if node == nil {
					continue
				}
				in := regInput{kind: opKind(crng.IntN(3)), key: keys[crng.IntN(len(keys))],
					value: fmt.Sprintf("c%d-%d", cl, seq), version: int64(crng.IntN(4))}
				opCtx, opCancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				call := time.Now()
				out, keep := runOp(opCtx, node, in)
				ret := time.Now()
				if out.ambiguous && opCtx.Err() == nil && node.Err() == nil {
					// Writes are exactly-once and resent: only a call that
					// ended (its context, its member) may not know.
					t.Errorf("seed %d: %v(%s) ended ambiguous with its context and member alive: %v", seed, in.kind, in.key, out.err)
				}
				opCancel()
				if keep {
					record(cl, in, out, call, ret)
				}
			}
		}()
	}

	runNemesis(ctx, c, rng, nil)
	wg.Wait()
	c.Heal()

	mu.Lock()
	defer mu.Unlock()
	completed := 0
	for _, op := range history {
		if op.Return != math.MaxInt64 {
			completed++
		}
	}
	t.Logf("%d operations recorded, %d completed", len(history), completed)
	if completed < 20 {
		t.Fatalf("too few operations completed (%d) to say anything (seed %d)", completed, seed)
	}
	requireLinearizable(t, history, seed, "coord-linearizability")
}

// requireLinearizable checks history against the register model and, if
// it is not linearizable, writes porcupine's visualization to a file
// named after name and fails with the seed.
func requireLinearizable(t *testing.T, history []porcupine.Operation, seed int64, name string) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(registerModel, history, 2*time.Minute)
	if res == porcupine.Illegal {
		f, err := os.CreateTemp("", name+"-*.html")
		if err == nil {
			porcupine.Visualize(registerModel, info, f)
			f.Close()
			t.Logf("visualization: %s", f.Name())
		}
		t.Fatalf("history is not linearizable (seed %d)", seed)
	}
	if res == porcupine.Unknown {
		t.Fatalf("linearizability check timed out (seed %d): history too large to decide", seed)
	}
}

// runOp performs one operation; keep=false means it certainly did not
// happen (or was a failed read) and is left out of the history.
func runOp(ctx context.Context, n *coord.Node, in regInput) (regOutput, bool) {
	switch in.kind {
	case opGet:
		kv, err := n.Get(ctx, in.key)
		if errors.Is(err, coord.ErrNotFound) {
			return regOutput{found: false}, true
		}
		if err != nil {
			return regOutput{}, false
		}
		return regOutput{found: true, value: string(kv.Value), version: kv.Version}, true
	case opPut:
		_, err := n.Put(ctx, in.key, []byte(in.value))
		return writeOutcome(err, regOutput{})
	default:
		_, err := n.Put(ctx, in.key, []byte(in.value), coord.IfVersion(in.version))
		if errors.Is(err, coord.ErrConflict) {
			return regOutput{ok: false}, true
		}
		return writeOutcome(err, regOutput{ok: true})
	}
}

func writeOutcome(err error, ok regOutput) (regOutput, bool) {
	switch {
	case err == nil:
		return ok, true
	case errors.Is(err, coord.ErrAmbiguous):
		return regOutput{ambiguous: true, err: err}, true
	case errors.Is(err, coord.ErrNoQuorum), errors.Is(err, coord.ErrClosed):
		return regOutput{}, false // certainly not applied
	default:
		return regOutput{ambiguous: true, err: err}, true
	}
}

// runNemesis impairs c until ctx ends: partitions, isolations, crashes
// of up to two members at a time and heals with restarts, one every
// 100–400ms, drawn from rng. extra, when not nil, is a further action the
// nemesis takes one time in seven. It leaves every member running again
// (the network may still be cut: the caller heals it once its workers
// have stopped).
func runNemesis(ctx context.Context, c *coordtest.Cluster, rng *rand.Rand, extra func()) {
	actions := 6
	if extra != nil {
		actions = 7
	}
	crashed := map[int]bool{}
	for ctx.Err() == nil {
		switch rng.IntN(actions) {
		case 0:
			perm := rng.Perm(c.Size())
			cut := 1 + rng.IntN(c.Size()-1)
			c.Partition(perm[:cut], perm[cut:])
		case 1:
			c.Isolate(rng.IntN(c.Size()))
		case 2, 3:
			if len(crashed) < 2 {
				if i := rng.IntN(c.Size()); !crashed[i] {
					c.Crash(i)
					crashed[i] = true
				}
			}
		case 6:
			extra()
		default:
			c.Heal()
			for i := range crashed {
				c.Restart(i)
				delete(crashed, i)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(100+rng.IntN(300)) * time.Millisecond):
		}
	}
	for i := range crashed {
		c.Restart(i)
	}
}
