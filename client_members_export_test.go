package coord

// MergeLearned exposes mergeLearned to the client tests.
func MergeLearned(configured, answer, before []string, tcp bool) []string {
	return mergeLearned(configured, answer, before, tcp)
}

// ClientLearn merges answer into c's learned addresses as a member's
// Members answer would be.
func ClientLearn(c *Client, answer []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learned = mergeLearned(c.cfg.Members, answer, c.learned, c.cfg.Dial == nil)
}

// ClientServeAddrs is what n answers a client's Members with.
func ClientServeAddrs(n *Node) []string { return n.clients.ownAddrs() }
