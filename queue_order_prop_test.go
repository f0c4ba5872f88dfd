package coord

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// Property tests of the queue ordering rules that carry invariant 1 (see
// ARCHITECTURE.md): over random queues of every kind mixed on one name,
// at most one exclusive holder and then no other; no reader ahead of an
// earlier writer; at most n semaphore slots; FIFO among equals; and a
// waiter's blockers are exactly what keeps it out.

const propRounds = 3000

func randomQueue(r *rand.Rand, prefix string) []KV {
	kinds := []byte{kindMutex, kindWriter, kindReader, kindReader, kindSlot, kindSlot}
	n := r.IntN(12)
	kvs := make([]KV, 0, n)
	limit := 1 + r.IntN(4) // one limit per name, as Semaphore keeps it
	for i := range n {
		kind := kinds[r.IntN(len(kinds))]
		kv := KV{Key: fmt.Sprintf("%s%c%032x", prefix, kind, i), CreateRev: int64(r.IntN(1000)*16 + i)}
		if kind == kindSlot {
			kv.Value = []byte(strconv.Itoa(limit))
		}
		kvs = append(kvs, kv)
	}
	r.Shuffle(len(kvs), func(i, j int) { kvs[i], kvs[j] = kvs[j], kvs[i] })
	return kvs
}

func exclusive(k byte) bool { return k == kindMutex || k == kindWriter || k == kindLeader }

func TestQueueOrderProperties(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	for round := range propRounds {
		q := parseQueue("locks/x/", true, randomQueue(r, "locks/x/"))
		checkQueue(t, round, q)
	}
}

func TestElectionQueueOrderProperties(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for round := range propRounds {
		var kvs []KV
		for i := range r.IntN(8) {
			kvs = append(kvs, KV{Key: fmt.Sprintf("elections/g/%032x", i), CreateRev: int64(r.IntN(1000)*16 + i)})
		}
		q := parseQueue("elections/g/", false, kvs)
		h := holders(q)
		if len(q) > 0 && (len(h) != 1 || h[0].kv.Key != q[0].kv.Key) {
			t.Fatalf("round %d: election holders %v, want the oldest entry alone", round, keys(h))
		}
		checkQueue(t, round, q)
	}
}

func checkQueue(t *testing.T, round int, q []entry) {
	t.Helper()
	holds := make([]bool, len(q))
	var nExcl, nSlots, nHold int
	for i := range q {
		b := blockers(q, i)
		holds[i] = b == nil
		if !holds[i] {
			// Every blocker is an earlier entry of the queue.
			for _, k := range b {
				found := false
				for j := 0; j < i; j++ {
					found = found || q[j].kv.Key == k
				}
				if !found {
					t.Fatalf("round %d: entry %d blocked by %q, not an earlier entry", round, i, k)
				}
			}
			continue
		}
		nHold++
		if exclusive(q[i].kind) {
			nExcl++
		}
		if q[i].kind == kindSlot {
			nSlots++
			if nSlots > q[i].limit {
				t.Fatalf("round %d: %d slots held, limit %d", round, nSlots, q[i].limit)
			}
		}
		for j := 0; j < i; j++ {
			if q[i].kind == kindReader && !exclusive(q[j].kind) && q[j].kind != kindReader {
				t.Fatalf("round %d: reader %d holds behind a slot %d", round, i, j)
			}
			if q[i].kind == kindReader && exclusive(q[j].kind) {
				t.Fatalf("round %d: reader %d holds behind an earlier writer %d", round, i, j)
			}
			// FIFO among equals: nobody holds while an earlier entry of
			// its own kind waits.
			if q[j].kind == q[i].kind && !holds[j] {
				t.Fatalf("round %d: entry %d holds while earlier %d of its kind waits", round, i, j)
			}
		}
	}
	if nExcl > 1 || (nExcl == 1 && nHold > 1) {
		t.Fatalf("round %d: %d exclusive holders among %d holders", round, nExcl, nHold)
	}
	if len(q) > 0 && !holds[0] {
		t.Fatalf("round %d: the oldest entry does not hold", round)
	}
}

func keys(es []entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.kv.Key
	}
	return out
}
