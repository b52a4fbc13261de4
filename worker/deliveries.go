package worker

import (
	"crypto/sha256"
	"encoding/binary"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/llmq/llmq/transport"
)

// maxDeliveries is how many deliveries of a message the worker tries to
// record before it dead-letters the message instead of handing it back
// again: no message loops through the broker, whatever it holds.
const maxDeliveries = 3

// deliveriesRemembered bounds the messages whose failed deliveries are
// counted (the least recently failed are forgotten first).
const deliveriesRemembered = 4096

// deliveries counts, per message (its key and body), the deliveries this
// worker failed to record. The count is in memory: a restart may allow one
// more delivery. Safe for concurrent use.
type deliveries struct {
	failed *lru.Cache[[sha256.Size]byte, int]
}

func newDeliveries() deliveries {
	c, err := lru.New[[sha256.Size]byte, int](deliveriesRemembered)
	if err != nil {
		panic(err) // only for a size <= 0
	}
	return deliveries{failed: c}
}

// fail counts one more failed delivery of m and returns the count.
func (d deliveries) fail(m *transport.Message) int {
	h := sha256.New()
	_ = binary.Write(h, binary.BigEndian, uint64(len(m.Key)))
	h.Write(m.Key)
	h.Write(m.Value)
	var k [sha256.Size]byte
	h.Sum(k[:0])
	n, _ := d.failed.Get(k)
	n++
	d.failed.Add(k, n)
	return n
}
