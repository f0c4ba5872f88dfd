// Command kv runs a coord cell over TCP on loopback.
//
// With no flags it is a demo: three members in this process, each with
// its own data directory and TCP port, doing puts, a compare-and-set, a
// transaction and a watch, then losing their leader and carrying on.
//
//	go run ./examples/kv
//
// With -name it runs one member of a multi-process cell and serves a
// small HTTP API for it:
//
//	go run ./examples/kv -name a -addr 127.0.0.1:7001 -http 127.0.0.1:8001 \
//	    -peers a=127.0.0.1:7001,b=127.0.0.1:7002,c=127.0.0.1:7003 -data /tmp/a
//
// -tick sets the Raft tick of the member (every member of a cell should
// have the same): the election timeout is ten ticks and the shortest
// session TTL forty, so a shorter tick makes failover and expiry quicker
// to watch (the tests use 40ms).
//
//	PUT  /kv/{key}   body = value      -> 200 with the revision
//	GET  /kv/{key}[?serializable=1]     -> 200 value, 404 if absent
//	GET  /status                        -> JSON status
//	POST /sessions[?ttl=10s]            -> JSON {"id": ...}: a session kept by this member
//	GET  /sessions/{id}                 -> JSON: ended, jeopardy seen, error
//	POST /sessions/{id}/locks/{name}[?wait=5s&delay=10s] -> JSON {"name", "token"}: the lock, with its fencing token
//	DELETE /sessions/{id}/locks/{name}  -> 204: released
//	/coord/...                          -> the member's Handler: /healthz, /readyz, /status, the HTML page, /admin for coordctl
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/coordcell/coord"
)

func main() {
	name := flag.String("name", "", "member name (omit for the in-process demo)")
	addr := flag.String("addr", "", "this member's transport address")
	peers := flag.String("peers", "", "founding members: name=addr,name=addr,...")
	data := flag.String("data", "", "data directory")
	httpAddr := flag.String("http", "", "address of the HTTP API")
	verbose := flag.Bool("v", false, "log cell events to stderr")
	tick := flag.Duration("tick", 0, "Raft tick (0: coord's default, 100ms); the election timeout is ten ticks, the shortest session TTL forty")
	flag.Parse()
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	var err error
	if *name == "" {
		err = demo(logger)
	} else {
		err = serve(*name, *addr, *peers, *data, *httpAddr, *tick, logger)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kv:", err)
		os.Exit(1)
	}
}

func demo(logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "coord-kv-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	names := []string{"a", "b", "c"}
	addrs, err := freePorts(len(names))
	if err != nil {
		return err
	}
	var peers []coord.Peer
	for i, n := range names {
		peers = append(peers, coord.Peer{Name: n, Addr: addrs[i]})
	}
	fmt.Println("starting a 3-member cell over TCP on loopback:")
	nodes := map[string]*coord.Node{}
	for _, p := range peers {
		n, err := coord.Open(ctx, coord.Config{
			Name: p.Name, Addr: p.Addr, Peers: peers, DataDir: dir + "/" + p.Name, Logger: logger,
		})
		if err != nil {
			return err
		}
		defer n.Close()
		nodes[p.Name] = n
		fmt.Printf("  member %s on %s\n", p.Name, p.Addr)
	}
	leader, err := waitLeader(ctx, nodes)
	if err != nil {
		return err
	}
	fmt.Printf("member %s was elected leader\n", leader)

	a, b := nodes["a"], nodes["b"]
	w := b.Watch(ctx, "config/")
	kv, err := a.Put(ctx, "config/timeout", []byte("30s"))
	if err != nil {
		return err
	}
	fmt.Printf("a: put config/timeout=30s      -> version %d, revision %d\n", kv.Version, kv.ModRev)
	got, err := b.Get(ctx, "config/timeout")
	if err != nil {
		return err
	}
	fmt.Printf("b: get config/timeout          -> %s (linearizable read on a member)\n", got.Value)
	if _, err := a.Put(ctx, "config/timeout", []byte("45s"), coord.IfVersion(7)); errors.Is(err, coord.ErrConflict) {
		fmt.Println("a: put if version 7            -> refused: compare failed (version is 1)")
	}
	kv, err = a.Put(ctx, "config/timeout", []byte("45s"), coord.IfVersion(1))
	if err != nil {
		return err
	}
	fmt.Printf("a: put if version 1            -> ok, version %d\n", kv.Version)
	res, err := b.Txn(ctx).
		If(coord.Value("config/timeout").Eq([]byte("45s"))).
		Then(coord.OpPut("config/retries", []byte("3")), coord.OpDelete("config/legacy")).
		Commit()
	if err != nil {
		return err
	}
	fmt.Printf("b: txn (if timeout=45s then put retries) -> succeeded=%v at revision %d\n", res.Succeeded, res.Rev)
	for range 3 {
		ev := <-w.Events()
		fmt.Printf("b: watch saw %s %s=%s at revision %d\n", ev.Type, ev.KV.Key, ev.KV.Value, ev.Rev)
	}
	w.Close()

	fmt.Printf("closing the leader %s (it hands leadership over first)\n", leader)
	nodes[leader].Close()
	delete(nodes, leader)
	next, err := waitLeader(ctx, nodes)
	if err != nil {
		return err
	}
	fmt.Printf("member %s leads now\n", next)
	kvs, rev, err := nodes[next].List(ctx, "config/")
	if err != nil {
		return err
	}
	fmt.Printf("%s: list config/ at revision %d:\n", next, rev)
	for _, kv := range kvs {
		fmt.Printf("  %s=%s (version %d)\n", kv.Key, kv.Value, kv.Version)
	}
	if _, err := nodes[next].Put(ctx, "config/after-failover", []byte("yes")); err != nil {
		return err
	}
	fmt.Println("writes go on with two of three members")
	return nil
}

func waitLeader(ctx context.Context, nodes map[string]*coord.Node) (string, error) {
	for {
		for name, n := range nodes {
			if n.Status().Role == coord.RoleLeader {
				return name, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freePorts returns n loopback addresses free a moment ago. It holds every
// listener until all are chosen, so no two addresses are the same port.
func freePorts(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

func serve(name, addr, peerList, data, httpAddr string, tick time.Duration, logger *slog.Logger) error {
	var peers []coord.Peer
	for _, p := range strings.Split(peerList, ",") {
		if p == "" {
			continue
		}
		n, a, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("bad -peers entry %q (want name=addr)", p)
		}
		peers = append(peers, coord.Peer{Name: n, Addr: a})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	node, err := coord.Open(ctx, coord.Config{Name: name, Addr: addr, Peers: peers, DataDir: data, TickInterval: tick, Logger: logger})
	if err != nil {
		return err
	}
	defer node.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /kv/{key...}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		kv, err := node.Put(r.Context(), r.PathValue("key"), body)
		if err != nil {
			http.Error(w, err.Error(), httpStatus(err))
			return
		}
		fmt.Fprintln(w, kv.ModRev)
	})
	mux.HandleFunc("GET /kv/{key...}", func(w http.ResponseWriter, r *http.Request) {
		var opts []coord.ReadOption
		if r.URL.Query().Get("serializable") != "" {
			opts = append(opts, coord.Serializable())
		}
		kv, err := node.Get(r.Context(), r.PathValue("key"), opts...)
		if err != nil {
			http.Error(w, err.Error(), httpStatus(err))
			return
		}
		w.Write(kv.Value)
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(node.Status())
	})
	sessions := newSessionBook(node)
	// The member's own pages under /coord/: health, readiness, status, the
	// read-only HTML view, and the admin API coordctl speaks (token from
	// COORD_ADMIN_TOKEN; without one, admin is left to the network).
	mux.Handle("/coord/", http.StripPrefix("/coord", node.Handler(coord.WithAdmin(os.Getenv("COORD_ADMIN_TOKEN")))))
	mux.HandleFunc("POST /sessions", sessions.create)
	mux.HandleFunc("GET /sessions/{id}", sessions.get)
	mux.HandleFunc("POST /sessions/{id}/locks/{name}", sessions.lock)
	mux.HandleFunc("DELETE /sessions/{id}/locks/{name}", sessions.unlock)
	srv := &http.Server{Addr: httpAddr, Handler: mux}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("member %s serving on %s (cell transport %s)\n", name, httpAddr, addr)
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	case <-node.Done():
		return node.Err()
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		// Requests still running after the grace period, or connections
		// that never sent one (net/http waits 5 s for those): cut them.
		// The member itself still leaves gracefully (node.Close).
		logger.Info("closing the HTTP connections left after the grace period", "err", err)
		srv.Close()
	}
	return nil
}

func httpStatus(err error) int {
	switch {
	case errors.Is(err, coord.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, coord.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, coord.ErrKeyTooLarge), errors.Is(err, coord.ErrValueTooLarge), errors.Is(err, coord.ErrInvalidKey),
		errors.Is(err, coord.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, coord.ErrNoQuorum), errors.Is(err, coord.ErrAmbiguous):
		return http.StatusServiceUnavailable
	case errors.Is(err, coord.ErrTimeout):
		return http.StatusRequestTimeout
	case errors.Is(err, coord.ErrSessionExpired), errors.Is(err, coord.ErrSessionClosed):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}
