package pool

import (
	"context"
	"maps"
)

// maxCachedParams bounds how many Startups' parameter statuses a pool
// keeps besides the zero Startup's: clients choose their startup
// parameters, and must not be able to grow the cache without bound.
const maxCachedParams = 64

// paramCache holds the ParameterStatus values reported by the first
// server opened with each Startup, keyed by Startup.Key. The zero
// Startup's entry is kept for the pool's life; the others are evicted
// least recently used first. Its owner's mutex guards it.
type paramCache struct {
	zero map[string]string
	keys map[string]*cachedParams
	tick uint64 // counts uses, to order entries by their last use
}

type cachedParams struct {
	params map[string]string
	used   uint64
}

// add records params for key unless it has an entry already; it copies
// params, which the server's owner updates as the server reports changes.
func (c *paramCache) add(key string, params map[string]string) {
	if key == "" {
		if c.zero == nil {
			c.zero = copyParams(params)
		}
		return
	}
	if c.keys[key] != nil {
		return
	}
	if c.keys == nil {
		c.keys = make(map[string]*cachedParams)
	}
	if len(c.keys) >= maxCachedParams {
		var lru string
		var oldest uint64
		for k, e := range c.keys {
			if lru == "" || e.used < oldest {
				lru, oldest = k, e.used
			}
		}
		delete(c.keys, lru)
	}
	c.tick++
	c.keys[key] = &cachedParams{params: copyParams(params), used: c.tick}
}

// get returns the entry of key, or nil.
func (c *paramCache) get(key string) map[string]string {
	if key == "" {
		return c.zero
	}
	e := c.keys[key]
	if e == nil {
		return nil
	}
	c.tick++
	e.used = c.tick
	return e.params
}

func copyParams(params map[string]string) map[string]string {
	out := make(map[string]string, len(params))
	maps.Copy(out, params)
	return out
}

// CachedParams returns the parameters the pool's servers opened with the
// zero Startup reported, or nil before the first such connection.
func (p *Pool) CachedParams() map[string]string {
	return p.CachedParamsFor(Startup{})
}

// CachedParamsFor returns the parameters that the first server opened with
// st reported, or nil when there was none (or its entry was evicted: the
// pool remembers a bounded number of Startups). The map is shared: callers
// must not modify it.
func (p *Pool) CachedParamsFor(st Startup) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.params.get(st.key)
}

// Params returns the parameters the pool's servers opened with the zero
// Startup report, connecting once if no such connection was made yet.
func (p *Pool) Params(ctx context.Context) (map[string]string, error) {
	if params := p.CachedParams(); params != nil {
		return params, nil
	}
	s, err := p.Checkout(ctx)
	if err != nil {
		return nil, err
	}
	p.Checkin(s)
	return p.CachedParams(), nil
}
