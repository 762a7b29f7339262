package archive

import (
	"container/list"
	"sync"
)

// cache keeps the pages read last, up to a number of bytes: least recently used out first. A page
// larger than a quarter of it is not kept, so that one large page does not empty it.
type cache struct {
	mu    sync.Mutex
	limit int64
	bytes int64
	order *list.List // of *entry, most recent first
	pages map[int64]*list.Element
}

type entry struct {
	page int64
	obj  Object // with its owner: a page read from the cache is judged as one read from the bucket
}

func newCache(limit int64) *cache {
	return &cache{limit: limit, order: list.New(), pages: map[int64]*list.Element{}}
}

func (c *cache) get(page int64) (Object, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.pages[page]
	if !ok {
		return Object{}, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*entry).obj, true
}

func (c *cache) put(page int64, obj Object) {
	n := int64(len(obj.Bytes) + len(obj.Owner))
	if n > c.limit/4 {
		c.drop(page)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.pages[page]; ok {
		c.bytes -= e.Value.(*entry).size()
		c.order.Remove(e)
	}
	c.pages[page] = c.order.PushFront(&entry{page, obj})
	c.bytes += n
	for c.bytes > c.limit {
		last := c.order.Back()
		old := last.Value.(*entry)
		c.order.Remove(last)
		delete(c.pages, old.page)
		c.bytes -= old.size()
	}
}

func (c *cache) drop(page int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.pages[page]; ok {
		c.bytes -= e.Value.(*entry).size()
		c.order.Remove(e)
		delete(c.pages, page)
	}
}

func (c *cache) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

func (e *entry) size() int64 { return int64(len(e.obj.Bytes) + len(e.obj.Owner)) }
