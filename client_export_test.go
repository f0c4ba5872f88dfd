package coord

// ClientKeepAliveSends counts the KeepAlive messages c has sent.
func ClientKeepAliveSends(c *Client) int64 { return c.ka.sends.Load() }

// ClientUpstreams counts c's upstream watches open now.
func ClientUpstreams(c *Client) int {
	c.watches.mu.Lock()
	defer c.watches.mu.Unlock()
	return len(c.watches.ups)
}
