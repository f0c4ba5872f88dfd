package coord

// ClientCacheLists counts the listings the cache of prefix has taken.
func ClientCacheLists(c *Client, prefix string) int64 { return c.cache.covering(prefix).lists.Load() }

// ClientCacheHits counts the reads the cache of prefix has answered.
func ClientCacheHits(c *Client, prefix string) int64 { return c.cache.covering(prefix).hits.Load() }
