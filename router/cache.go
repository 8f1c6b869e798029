package router

import "sync"

// cache is a least-recently-used map from statement text to its analysis.
// A hit takes the lock once, looks the text up without allocating and moves
// the entry to the front of an intrusive list.
type cache struct {
	max int

	mu    sync.Mutex // guards the following
	items map[string]*cacheEntry
	head  cacheEntry // sentinel: head.next is the most recently used
}

type cacheEntry struct {
	sql        string
	stmt       *Statement
	prev, next *cacheEntry
}

func newCache(max int) *cache {
	c := &cache{max: max, items: make(map[string]*cacheEntry)}
	c.head.next, c.head.prev = &c.head, &c.head
	return c
}

func (c *cache) get(sql string) *Statement {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.items[sql]
	if e == nil {
		return nil
	}
	if c.head.next != e {
		e.unlink()
		c.pushFront(e)
	}
	return e.stmt
}

func (c *cache) put(sql string, s *Statement) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.items[sql]; e != nil {
		e.stmt = s
		return
	}
	e := &cacheEntry{sql: sql, stmt: s}
	c.items[sql] = e
	c.pushFront(e)
	for len(c.items) > c.max {
		old := c.head.prev
		old.unlink()
		delete(c.items, old.sql)
	}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

func (c *cache) pushFront(e *cacheEntry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}

func (e *cacheEntry) unlink() {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}
