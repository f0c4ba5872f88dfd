package coord_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/transport"
)

// A transaction moves a job from one queue to another only if it is
// still where the caller last saw it: the compare and both writes commit
// at one revision, or nothing does.
func ExampleNode_Txn() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	kv, err := nodes[0].Put(ctx, "queued/job-7", []byte("payload"))
	if err != nil {
		log.Fatal(err)
	}
	move := func() (bool, error) {
		res, err := nodes[1].Txn(ctx).
			If(coord.ModRev("queued/job-7").Eq(kv.ModRev)).
			Then(coord.OpDelete("queued/job-7"), coord.OpPut("running/job-7", kv.Value)).
			Commit()
		return res.Succeeded, err
	}
	first, err := move()
	if err != nil {
		log.Fatal(err)
	}
	second, err := move() // the job is no longer queued: the compare fails, nothing changes
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first move:", first, "second move:", second)
	// Output:
	// first move: true second move: false
}

// A nested transaction (OpTxn) decides one more thing in the same
// commit: here, whether this job is the first one, which also creates
// the counter.
func ExampleOpTxn() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	submit := func(job string) (bool, error) {
		res, err := nodes[0].Txn(ctx).Then(
			coord.OpPut("jobs/"+job, []byte("spec")),
			coord.OpTxn([]coord.Cmp{coord.Version("jobs-seen").Eq(0)},
				[]coord.Op{coord.OpPut("jobs-seen", []byte("yes"))},
				nil),
		).Commit()
		if err != nil {
			return false, err
		}
		return res.Results[1].Txn.Succeeded, nil
	}
	for _, job := range []string{"a", "b"} {
		first, err := submit(job)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(job, "first:", first)
	}
	// Output:
	// a first: true
	// b first: false
}

// ListWatch keeps a local copy of a prefix: a listing, then every change
// after it, and a fresh listing whenever the watch cannot go on.
func ExampleNode_ListWatch() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := nodes[0].Put(ctx, "flags/dark-mode", []byte("on")); err != nil {
		log.Fatal(err)
	}

	flags := map[string]string{}
	done := errors.New("seen the change")
	err := nodes[1].ListWatch(ctx, "flags/",
		func(kvs []coord.KV, rev int64) error {
			clear(flags)
			for _, kv := range kvs {
				flags[kv.Key] = string(kv.Value)
			}
			fmt.Println("listed:", flags)
			_, err := nodes[2].Put(ctx, "flags/beta", []byte("off")) // a change after the listing
			return err
		},
		func(ev coord.Event) error {
			if ev.Type == coord.EventPut {
				flags[ev.KV.Key] = string(ev.KV.Value)
			}
			fmt.Println("changed:", flags)
			return done
		})
	if !errors.Is(err, done) {
		log.Fatal(err)
	}
	// Output:
	// listed: map[flags/dark-mode:on]
	// changed: map[flags/beta:off flags/dark-mode:on]
}

// Readers share an RWMutex; a writer waits for them and holds it alone.
func ExampleRWMutex() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	session := func(n *coord.Node) *coord.Session {
		s, err := n.NewSession(ctx)
		if err != nil {
			log.Fatal(err)
		}
		return s
	}
	r1 := coord.NewRWMutex(session(nodes[0]), "catalog")
	r2 := coord.NewRWMutex(session(nodes[1]), "catalog")
	w := coord.NewRWMutex(session(nodes[2]), "catalog")
	if _, err := r1.RLock(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := r2.RLock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("two readers hold it")

	tryCtx, tryCancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := w.Lock(tryCtx) // the readers hold it: the writer's wait runs out
	tryCancel()
	fmt.Println("writer waited out:", errors.Is(err, coord.ErrTimeout))

	for _, r := range []*coord.RWMutex{r1, r2} {
		if err := r.RUnlock(ctx); err != nil {
			log.Fatal(err)
		}
	}
	tok, err := w.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer holds it with a token:", tok > 0)
	// Output:
	// two readers hold it
	// writer waited out: true
	// writer holds it with a token: true
}

// A Semaphore lets at most n holders in at once.
func ExampleSemaphore() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var slots []*coord.Semaphore
	for i := range 3 {
		s, err := nodes[i].NewSession(ctx)
		if err != nil {
			log.Fatal(err)
		}
		slots = append(slots, coord.NewSemaphore(s, "encoders", 2))
	}
	for _, sm := range slots[:2] {
		if _, err := sm.Acquire(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("two of two places taken")
	tryCtx, tryCancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := slots[2].Acquire(tryCtx)
	tryCancel()
	fmt.Println("a third waits, then times out:", errors.Is(err, coord.ErrTimeout))
	if err := slots[0].Release(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := slots[2].Acquire(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("a place freed, the third is in")
	// Output:
	// two of two places taken
	// a third waits, then times out: true
	// a place freed, the third is in
}

// Growing a cell by one member: the leader adds it as a learner, the new
// process opens with Join, and once it has caught up it is promoted to a
// voter (Promote says ErrNotCaughtUp until then). With gossip
// (Config.Gossip) the autopilot does all of this by itself.
func ExampleAdmin_AddLearner() {
	ctx := context.Background()
	var existing *coord.Node // a member of the running cell
	peers := []coord.Peer{{Name: "a", Addr: "10.0.0.1:7000"}, {Name: "b", Addr: "10.0.0.2:7000"},
		{Name: "c", Addr: "10.0.0.3:7000"}}

	if err := existing.Admin().AddLearner(ctx, "d", "10.0.0.4:7000"); err != nil {
		log.Fatal(err)
	}
	// On the new machine:
	d, err := coord.Open(ctx, coord.Config{
		Name: "d", Addr: "10.0.0.4:7000", DataDir: "/var/lib/coord",
		Peers: peers, // whom to ask; the cell tells it the rest
		Join:  true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	for {
		err := existing.Admin().Promote(ctx, "d")
		if !errors.Is(err, coord.ErrNotCaughtUp) {
			if err != nil {
				log.Fatal(err)
			}
			break
		}
		time.Sleep(time.Second) // still catching up
	}
}

// Members authenticate each other with mutual TLS from files they reload
// when the certificates rotate (each certificate names its member and has
// both server and client usage), or, without a PKI, with a shared secret
// of at least 32 random bytes.
func ExampleConfig_tls() {
	ctx := context.Background()
	tlsConf, err := transport.TLSFiles{
		CA: "/etc/coord/ca.pem", Cert: "/etc/coord/a.pem", Key: "/etc/coord/a-key.pem",
	}.Config("a")
	if err != nil {
		log.Fatal(err)
	}
	n, err := coord.Open(ctx, coord.Config{
		Name: "a", Addr: "10.0.0.1:7000", DataDir: "/var/lib/coord",
		Peers: []coord.Peer{{Name: "a", Addr: "10.0.0.1:7000"}, {Name: "b", Addr: "10.0.0.2:7000"},
			{Name: "c", Addr: "10.0.0.3:7000"}},
		TLS: tlsConf, // or: Secret: secret
	})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
}
