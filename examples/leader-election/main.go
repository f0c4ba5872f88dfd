// Command leader-election runs one member of a cell of OS processes that
// elect a leader among themselves over TCP.
//
// Start three, in three terminals (or with &):
//
//	go run ./examples/leader-election -name a -addr 127.0.0.1:7101 -peers a=127.0.0.1:7101,b=127.0.0.1:7102,c=127.0.0.1:7103 -data /tmp/le-a
//	go run ./examples/leader-election -name b -addr 127.0.0.1:7102 -peers a=127.0.0.1:7101,b=127.0.0.1:7102,c=127.0.0.1:7103 -data /tmp/le-b
//	go run ./examples/leader-election -name c -addr 127.0.0.1:7103 -peers a=127.0.0.1:7101,b=127.0.0.1:7102,c=127.0.0.1:7103 -data /tmp/le-c
//
// Each campaigns and prints every leadership change it observes. Kill the
// leader (Ctrl-C resigns at once; kill -9 lets its session expire) and
// another takes over with a greater fencing token. -tick sets the Raft
// tick (the same on every member): the election timeout is ten ticks and
// the shortest TTL forty.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/coordcell/coord"
)

func main() {
	name := flag.String("name", "", "member name (required)")
	addr := flag.String("addr", "", "this member's transport address")
	peers := flag.String("peers", "", "founding members: name=addr,name=addr,...")
	data := flag.String("data", "", "data directory (\"\" = in memory)")
	ttl := flag.Duration("ttl", 5*time.Second, "session TTL: how long a dead leader keeps the office (at least MinSessionTTL, 4s with the default timing)")
	tick := flag.Duration("tick", 0, "Raft tick (0: coord's default, 100ms); the election timeout is ten ticks, the shortest TTL forty")
	flag.Parse()
	if err := run(*name, *addr, *peers, *data, *ttl, *tick); err != nil {
		fmt.Fprintln(os.Stderr, "leader-election:", err)
		os.Exit(1)
	}
}

func run(name, addr, peerList, data string, ttl, tick time.Duration) error {
	if name == "" {
		return errors.New("-name is required")
	}
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
	node, err := coord.Open(ctx, coord.Config{Name: name, Addr: addr, Peers: peers, DataDir: data,
		TickInterval: tick, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer node.Close()
	fmt.Printf("%s: member up on %s\n", name, addr)

	go observe(ctx, node, name)
	for ctx.Err() == nil {
		if err := campaignOnce(ctx, node, name, ttl); err != nil && ctx.Err() == nil {
			fmt.Printf("%s: %v; campaigning again\n", name, err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// campaignOnce opens a session, campaigns, and leads until the session or
// the process ends.
func campaignOnce(ctx context.Context, node *coord.Node, name string, ttl time.Duration) error {
	s, err := node.NewSession(ctx, coord.WithTTL(ttl))
	if err != nil {
		return err
	}
	defer closeSession(s)
	e := coord.NewElection(s, "leader-election-demo")
	token, err := e.Campaign(ctx, name)
	if err != nil {
		return err
	}
	fmt.Printf("%s: I am the leader (fencing token %d)\n", name, token)
	select {
	case <-ctx.Done():
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := e.Resign(rctx); err == nil {
			fmt.Printf("%s: resigned\n", name)
		}
		return nil
	case <-s.Done():
		return fmt.Errorf("lost leadership: %w", s.Err())
	}
}

func observe(ctx context.Context, node *coord.Node, name string) {
	for ctx.Err() == nil {
		s, err := node.NewSession(ctx, coord.WithTTL(30*time.Second))
		if err != nil {
			continue
		}
		for l := range coord.NewElection(s, "leader-election-demo").Observe(ctx) {
			if l.Vacant {
				fmt.Printf("%s: observed: no leader\n", name)
			} else {
				fmt.Printf("%s: observed: leader is %s (token %d)\n", name, l.Value, l.Token)
			}
		}
		closeSession(s)
	}
}

// closeSession ends s in the cell, giving up after a few seconds: at
// shutdown the cell may have lost its quorum (the other members stopping
// too), and then the session simply expires after its TTL.
func closeSession(s *coord.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = s.Close(ctx)
}
