package producer

// QueuedRecords is the number of PublishBatch calls waiting for a flush
// slot of p's group commit.
func QueuedRecords(p *Producer) int {
	p.group.mu.Lock()
	defer p.group.mu.Unlock()
	return len(p.group.queue)
}

// GroupFlushes is the number of flushes in flight at once.
const GroupFlushes = groupFlushes
