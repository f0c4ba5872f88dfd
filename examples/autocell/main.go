// Command autocell shows a cell forming itself: start N copies with the
// same -seed (the gossip address of any one of them) and each its own
// -zone; the first 3 found the cell, the rest join it, the autopilot
// promotes and spreads voters, and replaces a copy that is killed.
//
//	go run ./examples/autocell -name a -gossip 127.0.0.1:7001 -addr 127.0.0.1:8001 -zone z1 &
//	go run ./examples/autocell -name b -gossip 127.0.0.1:7002 -addr 127.0.0.1:8002 -zone z2 -seed 127.0.0.1:7001 &
//	...
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/coordcell/coord"
)

func main() {
	name := flag.String("name", "", "this copy's member name (unique)")
	addr := flag.String("addr", "127.0.0.1:0", "Raft transport address (TCP)")
	gossipAddr := flag.String("gossip", "127.0.0.1:7946", "gossip address (UDP and TCP)")
	seed := flag.String("seed", "", "gossip addresses of other copies, comma-separated")
	zone := flag.String("zone", "", "failure domain")
	expect := flag.Int("expect", 3, "members that found the cell")
	data := flag.String("data", "", "data directory (empty = in memory)")
	fast := flag.Bool("fast", false, "short autopilot timings (stabilization 1s, dead after 2s)")
	flag.Parse()
	if *name == "" {
		log.Fatal("autocell: -name is required")
	}
	g := &coord.GossipConfig{BindAddr: *gossipAddr, Zone: *zone, BootstrapExpect: *expect}
	if *seed != "" {
		g.Seeds = strings.Split(*seed, ",")
	}
	if *fast {
		g.Autopilot = coord.AutopilotConfig{Stabilization: time.Second, DeadThreshold: 2 * time.Second, Interval: 200 * time.Millisecond}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("%s: gossiping on %s, waiting to found or join a cell\n", *name, *gossipAddr)
	n, err := coord.Open(ctx, coord.Config{
		Name: *name, Addr: *addr, DataDir: *data, Gossip: g,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		log.Fatalf("autocell: %v", err)
	}
	defer n.Close()
	fmt.Printf("%s: in the cell\n", *name)
	watch(ctx, *name, n)
}

// watch prints what changes: the leader, each member's role and health,
// and the autopilot's decisions while this copy leads.
func watch(ctx context.Context, self string, n *coord.Node) {
	var lastLeader, lastDecision string
	last := map[string]string{}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l := n.Status().Leader; l != lastLeader && l != "" {
			fmt.Printf("%s: leader is %s\n", self, l)
			lastLeader = l
		}
		if d := n.Admin().Autopilot(); d.Action != "" && d.Action != "none" {
			if s := fmt.Sprintf("%s %s (%s)", d.Action, d.Member, d.Reason); s != lastDecision {
				fmt.Printf("%s: autopilot: %s\n", self, s)
				lastDecision = s
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ms, err := n.Admin().Members(rctx)
		cancel()
		if err != nil {
			continue
		}
		now := map[string]string{}
		for _, m := range ms {
			now[m.Name] = fmt.Sprintf("%s zone=%q %s", m.Role, m.Zone, m.Health)
		}
		names := make([]string, 0, len(now))
		for m := range now {
			names = append(names, m)
		}
		slices.Sort(names)
		for _, m := range names {
			if last[m] != now[m] {
				fmt.Printf("%s: member %s: %s\n", self, m, now[m])
			}
		}
		for m := range last {
			if _, ok := now[m]; !ok {
				fmt.Printf("%s: member %s: removed\n", self, m)
			}
		}
		last = now
	}
}
