package dlq

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/llmq/llmq/store"
)

// Letter is one dead-lettered message: the original bytes and why they are
// here. The worker builds it; a [Writer] records it in Postgres, publishes
// it to the dead-letter queue and raises an alert.
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
}

// Event returns the alert event for the letter.
func (l Letter) Event() Event {
	return Event{JobID: l.JobID, Tenant: l.Tenant, Reason: l.Reason, LastError: l.LastError, Model: l.Model, Time: l.At}
}

// keyBase identifies the letter's job, or for a poison message without an
// id its key and body, so that recording it again after a redelivery finds
// the same row. Two identical poison messages are one letter.
func (l Letter) keyBase() string {
	if l.JobID != "" {
		return "job:" + l.JobID
	}
	h := sha256.New()
	_ = binary.Write(h, binary.BigEndian, uint64(len(l.Key)))
	h.Write(l.Key)
	h.Write(l.Message)
	return "msg:" + hex.EncodeToString(h.Sum(nil))
}

// Record is a stored dead letter.
type Record struct {
	Letter
	// ID is the letter's id (x-llmq-dead-letter-id).
	ID int64
	// Destination is the dead-letter topic or queue.
	Destination string
	// PublishedAt is when the publish to Destination was confirmed; nil
	// until then (Repair retries it).
	PublishedAt *time.Time
	// ReplayedAt is when the letter's replay began; nil when it was never
	// replayed.
	ReplayedAt *time.Time
	// ReplayPublishedAt is when the replayed message was confirmed on the
	// main queue; nil while a begun replay is unfinished.
	ReplayPublishedAt *time.Time
	// ReplayCount is how many replays the letter had (0 or 1).
	ReplayCount int
}

func recordOf(d *store.DeadLetter) Record {
	return Record{
		Letter: Letter{
			JobID: d.JobID, Tenant: d.Tenant, Reason: Reason(d.Reason), LastError: d.LastError,
			Attempts: d.Attempts, Model: d.Model, Message: d.Message, Key: d.MessageKey,
			Headers: d.Headers, Source: d.Source, At: d.CreatedAt,
		},
		ID: d.ID, Destination: d.Destination, PublishedAt: d.PublishedAt, ReplayedAt: d.ReplayedAt,
		ReplayPublishedAt: d.ReplayPublishedAt, ReplayCount: d.ReplayCount,
	}
}
