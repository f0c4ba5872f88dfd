// Package hook lets coordtest reach what the root package keeps out of
// its exported API: the in-memory gossip network's transport, which is a
// memberlist type. The root sets the functions in its init; coordtest
// calls them. Nothing else should.
package hook

import "github.com/hashicorp/memberlist"

// SetGossipTransport makes the *coord.GossipConfig cfg carry gossip over
// t instead of UDP and TCP.
var SetGossipTransport func(cfg any, t memberlist.Transport)

// GossipTransport returns the transport SetGossipTransport gave the
// *coord.GossipConfig cfg, nil if none.
var GossipTransport func(cfg any) memberlist.Transport
