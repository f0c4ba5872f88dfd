package lockq

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

type kv struct {
	key   string
	rev   int64
	value []byte
}

func fields(k *kv) (string, int64, []byte) { return k.key, k.rev, k.value }

func randomQueue(r *rand.Rand, prefix string) []kv {
	kinds := []byte{KindMutex, KindWriter, KindReader, KindReader, KindSlot, KindSlot}
	n := r.IntN(12)
	kvs := make([]kv, 0, n)
	limit := 1 + r.IntN(4) // one limit per name, as Semaphore keeps it
	for i := range n {
		kind := kinds[r.IntN(len(kinds))]
		k := kv{key: fmt.Sprintf("%s%c%032x", prefix, kind, i), rev: int64(r.IntN(1000)*16 + i)}
		if kind == KindSlot {
			k.value = []byte(strconv.Itoa(limit))
		}
		kvs = append(kvs, k)
	}
	r.Shuffle(len(kvs), func(i, j int) { kvs[i], kvs[j] = kvs[j], kvs[i] })
	return kvs
}

func exclusive(k byte) bool { return k == KindMutex || k == KindWriter || k == KindLeader }

func TestQueueOrderProperties(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	for round := range propRounds {
		q := Queue("locks/x/", true, randomQueue(r, "locks/x/"), fields)
		checkQueue(t, round, q)
	}
}

func TestElectionQueueOrderProperties(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for round := range propRounds {
		var kvs []kv
		for i := range r.IntN(8) {
			kvs = append(kvs, kv{key: fmt.Sprintf("elections/g/%032x", i), rev: int64(r.IntN(1000)*16 + i)})
		}
		q := Queue("elections/g/", false, kvs, fields)
		h := Holders(q)
		if len(q) > 0 && (len(h) != 1 || h[0].Key != q[0].Key) {
			t.Fatalf("round %d: election holders %v, want the oldest entry alone", round, keys(h))
		}
		checkQueue(t, round, q)
	}
}

func checkQueue(t *testing.T, round int, q []Waiter[kv]) {
	t.Helper()
	holds := make([]bool, len(q))
	var nExcl, nSlots, nHold int
	for i := range q {
		b := Blockers(q, i)
		holds[i] = b == nil
		if !holds[i] {
			// Every blocker is an earlier entry of the queue.
			for _, k := range b {
				found := false
				for j := 0; j < i; j++ {
					found = found || q[j].Key == k
				}
				if !found {
					t.Fatalf("round %d: entry %d blocked by %q, not an earlier entry", round, i, k)
				}
			}
			continue
		}
		nHold++
		if exclusive(q[i].Kind) {
			nExcl++
		}
		if q[i].Kind == KindSlot {
			nSlots++
			if nSlots > q[i].Limit {
				t.Fatalf("round %d: %d slots held, limit %d", round, nSlots, q[i].Limit)
			}
		}
		for j := 0; j < i; j++ {
			if q[i].Kind == KindReader && !exclusive(q[j].Kind) && q[j].Kind != KindReader {
				t.Fatalf("round %d: reader %d holds behind a slot %d", round, i, j)
			}
			if q[i].Kind == KindReader && exclusive(q[j].Kind) {
				t.Fatalf("round %d: reader %d holds behind an earlier writer %d", round, i, j)
			}
			// FIFO among equals: nobody holds while an earlier entry of
			// its own kind waits.
			if q[j].Kind == q[i].Kind && !holds[j] {
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

func keys(es []Waiter[kv]) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Key
	}
	return out
}
