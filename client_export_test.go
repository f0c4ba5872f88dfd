package coord

// ClientKeepAliveSends counts the KeepAlive messages c has sent.
func ClientKeepAliveSends(c *Client) int64 { return c.ka.sends.Load() }

// ClientKeepAliveIDs counts the session IDs c's KeepAlive messages carried.
func ClientKeepAliveIDs(c *Client) int64 { return c.ka.ids.Load() }

// ClientUpstreams counts c's upstream watches open now.
func ClientUpstreams(c *Client) int {
	c.watches.mu.Lock()
	defer c.watches.mu.Unlock()
	return len(c.watches.ups)
}
