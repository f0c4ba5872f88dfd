// Package client is the client tier: what a process that is not a
// member runs to use a cell (the root's Connect and Client handle).
// Client keeps one connection to one member at a time and moves to
// another when that one fails or cannot serve (failover.go: one loop for
// every request), implements spi.Backend for the Cell API, keeps its
// sessions alive in one message per interval that its member folds into
// its own batch (keepalive.go), merges its watches (watch.go), caches
// prefixes it is asked to (cache.go), numbers its writes for
// exactly-once application (once.go) and learns the members' client
// addresses (members.go). It links no storage: a program that only
// connects needs no Pebble.
package client
