package coord

// KeepAliveBatches counts the keep-alive messages n sent to the leader,
// for the external tests of client keep-alive folding.
func KeepAliveBatches(n *Node) uint64 { return n.sessions.batches.Load() }
