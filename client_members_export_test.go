package coord

// MergeLearned exposes mergeLearned to the client tests.
func MergeLearned(configured, answer, before []string, tcp bool) []string {
	return mergeLearned(configured, answer, before, tcp)
}

// ClientServeAddrs is what n answers a client's Members with.
func ClientServeAddrs(n *Node) []string { return n.clients.ownAddrs() }
