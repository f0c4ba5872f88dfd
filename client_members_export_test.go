package coord

// MergeLearned exposes mergeLearned to the client tests.
func MergeLearned(configured, answer, before []string, tcp bool) []string {
	return mergeLearned(configured, answer, before, tcp)
}

// ClientServeAddrs is what n answers a client's Members with.
func ClientServeAddrs(n *Node) []string { return n.clients.ownAddrs() }

// ClientRounds returns the dial rounds a client configured with order
// (already shuffled) tries: the first, then one after each connection,
// the client connecting to the first candidate each time and then
// losing that member.
func ClientRounds(order, learned []string, rounds int) [][]string {
	c := &Client{order: order, learned: learned}
	var out [][]string
	left := ""
	for range rounds {
		round := c.candidates(left)
		out = append(out, round)
		c.connectedTo(round[0])
		left = round[0]
	}
	return out
}
