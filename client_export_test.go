package coord

import "github.com/coordcell/coord/internal/client"

// ClientKeepAliveSends counts the KeepAlive messages c has sent.
func ClientKeepAliveSends(c *Client) int64 { return c.c.KeepAliveSends() }

// ClientKeepAliveIDs counts the session IDs c's KeepAlive messages carried.
func ClientKeepAliveIDs(c *Client) int64 { return c.c.KeepAliveIDs() }

// ClientUpstreams counts c's upstream watches open now.
func ClientUpstreams(c *Client) int { return c.c.Upstreams() }

// ClientCacheLists counts the listings the cache of prefix has taken.
func ClientCacheLists(c *Client, prefix string) int64 {
	lists, _ := c.c.CacheCounts(prefix)
	return lists
}

// ClientCacheHits counts the reads the cache of prefix has answered.
func ClientCacheHits(c *Client, prefix string) int64 {
	_, hits := c.c.CacheCounts(prefix)
	return hits
}

// MergeLearned exposes the client's merge of learned addresses.
func MergeLearned(configured, answer, before []string, tcp bool) []string {
	return client.MergeLearned(configured, answer, before, tcp)
}

// ClientServeAddrs is what n answers a client's Members with.
func ClientServeAddrs(n *Node) []string { return n.clients.ownAddrs() }

// ClientRounds returns the dial rounds a client configured with order
// (already shuffled) tries: the first, then one after each connection,
// the client connecting to the first candidate each time and then
// losing that member.
func ClientRounds(order, learned []string, rounds int) [][]string {
	return client.Rounds(order, learned, rounds)
}
