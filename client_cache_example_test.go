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

// A client keeps the keys under config/ in memory: its serializable
// reads there are answered without a round trip to its member, they see
// the client's own writes, and a cached List returns the revision the
// cache was current to (Client.CacheRevision returns it without a read,
// or says why the member answers instead).
func ExampleClientConfig_cache() {
	clientSecret := bytes.Repeat([]byte{2}, 32) // draw at random in production

	network := transport.NewNetwork(1)
	defer network.Close()
	peers := []coord.Peer{{Name: "a", Addr: "a"}, {Name: "b", Addr: "b"}, {Name: "c", Addr: "c"}}
	var members []string
	for _, p := range peers {
		n, err := coord.Open(context.Background(), coord.Config{
			Name: p.Name, Peers: peers, Transport: network.Join(p.Name),
			TickInterval: 10 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
			Secret: bytes.Repeat([]byte{1}, 32), ClientSecret: clientSecret, ClientAddr: "127.0.0.1:0",
		})
		if err != nil {
			log.Fatal(err)
		}
		defer n.Close()
		members = append(members, n.Admin().ClientAddr())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := coord.Connect(ctx, coord.ClientConfig{Name: "web-1", Members: members, Secret: clientSecret,
		Cache: []string{"config/"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	put, err := client.Put(ctx, "config/mode", []byte("green"))
	if err != nil {
		log.Fatal(err)
	}
	kv, err := client.Get(ctx, "config/mode", coord.Serializable())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("mode: %s\n", kv.Value)
	kvs, rev, err := client.List(ctx, "config/", coord.Serializable())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("keys:", len(kvs), "read at or after the put:", rev >= put.ModRev)
	// A read before the cache's first listing is answered by the member;
	// CacheRevision says when the cache has caught up.
	for {
		cached, err := client.CacheRevision("config/")
		if err == nil && cached >= put.ModRev {
			break
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Println("cache current to the put")
	// Output:
	// mode: green
	// keys: 1 read at or after the put: true
	// cache current to the put
}
