package coord_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
)

// TestClientLinearizableUnderFaults is TestLinearizableUnderFaults with
// clients: workers on clients (spread over the members) and on members
// do puts, gets and compare-and-sets on a few keys while a nemesis
// partitions, isolates, crashes and restarts members and cuts clients
// off from theirs, so clients fail over mid-operation. The history,
// clients' and members' together, must be linearizable.
func TestClientLinearizableUnderFaults(t *testing.T) {
	t.Parallel()
	seed := rand.Int64()
	t.Logf("seed %d", seed)
	c := coordtest.NewCluster(t, 5, coordtest.WithSeed(seed), coordtest.WithClients())
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	duration := soakDuration(2 * time.Second) // the simulator (sim/) runs these faults at length
	// Each ambiguous write stays open to the end of its key's history,
	// and the checker's work grows steeply with the open writes of a key;
	// clients that fail over leave many. So a key that has had
	// maxAmbiguous of them is retired for a fresh one: every key's history
	// stays cheap to check, however long the run.
	const nkeys, maxAmbiguous = 8, 4
	keys := &keyRing{}
	for range nkeys {
		keys.add()
	}
	c.Leader()
	setup, cancelSetup := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelSetup()
	const nclients, nmembers = 6, 2 // workers on clients, on members
	clients := make([]*coord.Client, nclients)
	for i := range clients {
		cl, err := c.Connect(setup)
		if err != nil {
			t.Fatalf("connect client %d: %v (seed %d)", i, err, seed)
		}
		clients[i] = cl
	}

	start := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		// Why writes ended ambiguous, for the log: a cause that grows
		// out of proportion is worth a look.
		ambiguous = map[string]int{}
	)
	record := func(worker int, in regInput, out regOutput, call, ret time.Time) {
		mu.Lock()
		defer mu.Unlock()
		r := ret.Sub(start).Nanoseconds()
		if out.ambiguous {
			r = math.MaxInt64
		}
		history = append(history, porcupine.Operation{
			ClientId: worker, Input: in, Output: out, Call: call.Sub(start).Nanoseconds(), Return: r,
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	for w := range nclients + nmembers {
		wrng := rand.New(rand.NewPCG(uint64(seed), uint64(w)+100))
		wg.Go(func() {
			for seq := 0; ctx.Err() == nil; seq++ {
				var cell coord.Cell
				if w < nclients {
					cell = clients[w]
				} else if n := c.Node(wrng.IntN(c.Size())); n != nil {
					cell = n
				} else {
					continue
				}
				in := regInput{kind: opKind(wrng.IntN(3)), key: keys.pick(wrng),
					value: fmt.Sprintf("w%d-%d", w, seq), version: int64(wrng.IntN(4))}
				// Long enough for a client to move to another member.
				opCtx, opCancel := context.WithTimeout(context.Background(), 2*time.Second)
				call := time.Now()
				out, keep, err := runCellOp(opCtx, cell, in)
				ret := time.Now()
				if out.ambiguous && opCtx.Err() == nil {
					// Writes are exactly-once and resent, through the next
					// member for a client: only a call that ended (its
					// context, its member) may not know.
					if n, ok := cell.(*coord.Node); !ok || n.Err() == nil {
						t.Errorf("seed %d: %v(%s) ended ambiguous with its context and member alive: %v", seed, in.kind, in.key, err)
					}
				}
				opCancel()
				if keep {
					record(w, in, out, call, ret)
				}
				if out.ambiguous {
					keys.ambiguous(in.key, maxAmbiguous)
					mu.Lock()
					ambiguous[ambiguousCause(err)]++
					mu.Unlock()
				}
			}
		})
	}

	runNemesis(ctx, c, rng, func() { c.CutClient(clients[rng.IntN(nclients)]) })
	wg.Wait()
	c.Heal()

	mu.Lock()
	defer mu.Unlock()
	completed, byClients := 0, 0
	for _, op := range history {
		if op.Return != math.MaxInt64 {
			completed++
			if op.ClientId < nclients {
				byClients++
			}
		}
	}
	t.Logf("%d operations recorded on %d keys, %d completed, %d of them by clients; ambiguous writes: %v",
		len(history), keys.made(), completed, byClients, ambiguous)
	if byClients < 10 {
		t.Fatalf("too few client operations completed (%d) to say anything (seed %d)", byClients, seed)
	}
	requireLinearizable(t, history, seed, "coord-client-linearizability")
}

// keyRing is the set of keys in use, each retired after a number of
// ambiguous writes for a fresh one.
type keyRing struct {
	mu    sync.Mutex
	live  []string
	amb   map[string]int
	count int
}

func (r *keyRing) add() {
	r.live = append(r.live, fmt.Sprintf("key%d", r.count))
	r.count++
}

func (r *keyRing) pick(rng *rand.Rand) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[rng.IntN(len(r.live))]
}

// ambiguous counts one on key, retiring it at limit.
func (r *keyRing) ambiguous(key string, limit int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.amb == nil {
		r.amb = map[string]int{}
	}
	r.amb[key]++
	if r.amb[key] != limit {
		return
	}
	for i, k := range r.live {
		if k == key {
			r.live = append(r.live[:i], r.live[i+1:]...)
			r.add()
			return
		}
	}
}

func (r *keyRing) made() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// runCellOp is runOp on any Cell, a member or a client; it returns the
// operation's error too.
func runCellOp(ctx context.Context, cell coord.Cell, in regInput) (regOutput, bool, error) {
	switch in.kind {
	case opGet:
		kv, err := cell.Get(ctx, in.key)
		if errors.Is(err, coord.ErrNotFound) {
			return regOutput{found: false}, true, nil
		}
		if err != nil {
			return regOutput{}, false, err
		}
		return regOutput{found: true, value: string(kv.Value), version: kv.Version}, true, nil
	case opPut:
		_, err := cell.Put(ctx, in.key, []byte(in.value))
		out, keep := writeOutcome(err, regOutput{})
		return out, keep, err
	default:
		_, err := cell.Put(ctx, in.key, []byte(in.value), coord.IfVersion(in.version))
		if errors.Is(err, coord.ErrConflict) {
			return regOutput{ok: false}, true, nil
		}
		out, keep := writeOutcome(err, regOutput{ok: true})
		return out, keep, err
	}
}

// ambiguousCause names the sentinel behind an ambiguous write.
func ambiguousCause(err error) string {
	for _, s := range []error{coord.ErrAmbiguous, coord.ErrTimeout, context.DeadlineExceeded, coord.ErrOverloaded,
		coord.ErrNotLeader, coord.ErrInternal} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return fmt.Sprint(err)
}
