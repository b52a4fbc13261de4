package dlq

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// Letter is one dead-lettered message: the original bytes and why they are
// here. The worker and the batch lane build it; a [Writer] records it in
// Postgres (a [store.DeadLetter] row, which is what the [Service] reads
// back), publishes it to the dead-letter queue and raises an alert.
type Letter struct {
	// JobID is the job's id; empty for a poison message whose id could not
	// be read.
	JobID string
	// Tenant owns the job; empty means llmq.DefaultTenant.
	Tenant string
	// Reason classifies the cause; empty means ReasonUnknown.
	Reason Reason
	// LastError is the last error met (a validation error, the last
	// upstream error).
	LastError string
	// Attempts is how many upstream calls were made.
	Attempts int
	// Model is the model of the last attempt; may be empty.
	Model string
	// Message is the original message, byte for byte.
	Message []byte
	// Key is the original Kafka key; empty on RabbitMQ.
	Key []byte
	// Headers are the original broker headers.
	Headers map[string]string
	// Source is where the message came from: "topic/partition/offset" or
	// "queue/delivery-tag".
	Source string
	// At is when the job was dead-lettered; zero means now.
	At time.Time
	// LeaseToken, when not 0, is the lease of the worker that holds the
	// job and dead-letters it: the job moves to dead_lettered when the
	// letter is recorded, fenced to that lease (store.ErrLeaseLost when the
	// worker no longer holds it; nothing is recorded then).
	LeaseToken int64
}

// Event returns the alert event for the letter.
func (l Letter) Event() Event {
	return Event{JobID: l.JobID, Tenant: l.Tenant, Reason: l.Reason, LastError: l.LastError, Model: l.Model, Time: l.At}
}

// keyBase identifies the letter's job, or for a message that never became
// a job its key and body, so that recording it again after a redelivery finds
// the same row. Two identical poison messages are one letter.
func (l Letter) keyBase() string {
	if l.JobID != "" && !l.Reason.unrecorded() {
		return "job:" + cmp.Or(l.Tenant, llmq.DefaultTenant) + "/" + l.JobID
	}
	h := sha256.New()
	_ = binary.Write(h, binary.BigEndian, uint64(len(l.Key)))
	h.Write(l.Key)
	h.Write(l.Message)
	return "msg:" + hex.EncodeToString(h.Sum(nil))
}

// eventOf is the alert event of a stored letter.
func eventOf(d *store.DeadLetter) Event {
	return Event{JobID: d.JobID, Tenant: d.Tenant, Reason: Reason(d.Reason), LastError: d.LastError, Model: d.Model,
		Time: d.CreatedAt}
}
