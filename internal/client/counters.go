package client

// What the root's tests read of a client: counters and pure functions,
// exported here because the root's export_test.go cannot reach this
// package's unexported names.

// KeepAliveSends counts the KeepAlive messages the client has sent.
func (c *Client) KeepAliveSends() int64 { return c.ka.sends.Load() }

// KeepAliveIDs counts the session IDs its KeepAlive messages carried.
func (c *Client) KeepAliveIDs() int64 { return c.ka.ids.Load() }

// Upstreams counts the client's upstream watches open now.
func (c *Client) Upstreams() int {
	c.watches.mu.Lock()
	defer c.watches.mu.Unlock()
	return c.watches.ups.len()
}

// CacheCounts returns the listings taken and the reads answered by the
// cache of prefix; zeros when no cache holds it.
func (c *Client) CacheCounts(prefix string) (lists, hits int64) {
	p := c.cache.covering(prefix)
	if p == nil {
		return 0, 0
	}
	return p.lists.Load(), p.hits.Load()
}

// MergeLearned is mergeLearned, for the root's tests.
func MergeLearned(configured, answer, before []string, tcp bool) []string {
	return mergeLearned(configured, answer, before, tcp)
}

// Rounds returns the dial rounds a client configured with order
// (already shuffled) tries: the first, then one after each connection,
// the client connecting to the first candidate each time and then
// losing that member.
func Rounds(order, learned []string, rounds int) [][]string {
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
