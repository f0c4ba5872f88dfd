package coord_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/transport"
)

// A process that is not a member connects to a cell, takes a lock and
// gets a fencing token. The members serve clients on ClientAddr and
// authenticate them with the client secret, which the client holds
// instead of the members' own.
func ExampleConnect() {
	memberSecret := bytes.Repeat([]byte{1}, 32) // draw both at random in production
	clientSecret := bytes.Repeat([]byte{2}, 32)

	// A three-member cell in this process (normally, three processes).
	network := transport.NewNetwork(1)
	defer network.Close()
	peers := []coord.Peer{{Name: "a", Addr: "a"}, {Name: "b", Addr: "b"}, {Name: "c", Addr: "c"}}
	var members []string // their client addresses
	for _, p := range peers {
		n, err := coord.Open(context.Background(), coord.Config{
			Name: p.Name, Peers: peers, Transport: network.Join(p.Name),
			TickInterval: 10 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
			Secret: memberSecret, ClientSecret: clientSecret, ClientAddr: "127.0.0.1:0",
		})
		if err != nil {
			log.Fatal(err)
		}
		defer n.Close()
		members = append(members, n.Admin().ClientAddr())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := coord.Connect(ctx, coord.ClientConfig{Name: "worker-1", Members: members, Secret: clientSecret})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	s, err := client.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())
	m := coord.NewMutex(s, "jobs")
	token, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding jobs with a fencing token:", token > 0)
	if err := m.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// holding jobs with a fencing token: true
}
