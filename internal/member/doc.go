// Package member is the member runtime: what a process runs to be one
// member of a cell, under the root's Node and Admin handles. Node opens
// the storage and the Raft node and implements spi.Backend and
// spi.Keeper over them for the Cell API; around it are the session
// keep-alive engine (keepalive.go, ttl.go: a member's own sessions, and
// the leader's side while it leads), the client door and the serving of
// processes that are not members (door.go, serve*.go, auth.go),
// membership changes and a member's standing (membership.go,
// standing.go), gossip, bootstrap and the autopilot (gossip.go,
// bootstrap.go, autopilot.go), backup and restore, metrics, and the
// operational HTTP handler (handler*.go).
//
// Config is the root's Config, validated and with every default filled
// in by the root, which documents each field; the types here mirror the
// root's so that the root's exported API names no internal package.
package member
