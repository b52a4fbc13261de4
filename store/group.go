package store

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Group-commit defaults (see WithGroupCommit).
const (
	GroupFlushesDefault = 6
	GroupMaxOpsDefault  = 256
	groupFlushTimeout   = 30 * time.Second
)

// stmt is one SQL statement of an op.
type stmt struct {
	sql  string
	args []any
}

// op is one store operation: statements run in order in one transaction;
// the last returns at most one row, which scan reads (scan nil: the row is
// only counted).
type op struct {
	stmts []stmt
	scan  func(pgx.Rows) error
	done  chan opResult // buffered 1
}

type opResult struct {
	found bool
	err   error
}

// committer runs the hot-path writes of many goroutines (claims and state
// changes) as one pipelined batch per transaction, so that hundreds of jobs
// share one WAL flush instead of paying a commit each (measured on the
// project's machines, docs/design/platform.md: single-row statements
// ~3-10k/s, batches of 500 ~35k/s). Batches form by
// themselves: ops queue while every flush slot is busy, and the next free
// slot takes all of them. No op waits for a timer.
//
// If any statement of a batch fails, Postgres aborts the batch's implicit
// transaction, so nothing of it was written: each op of that batch is then
// run again on its own, and gets its own result or error.
type committer struct {
	pool   *pgxpool.Pool
	maxOps int
	ops    chan *op
	slots  chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once

	// mu guards closed: enqueue holds it shared, close exclusively, so
	// no op is queued after close drained the queue.
	mu     sync.RWMutex
	closed bool
}

func newCommitter(pool *pgxpool.Pool, flushes, maxOps int) *committer {
	c := &committer{
		pool: pool, maxOps: maxOps,
		ops:   make(chan *op, maxOps*flushes),
		slots: make(chan struct{}, flushes),
		stop:  make(chan struct{}),
	}
	c.wg.Add(1)
	go c.loop()
	return c
}

// close stops taking ops, waits for the flushes under way and fails the
// ops still queued.
func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.once.Do(func() { close(c.stop) })
	c.wg.Wait()
	for {
		select {
		case o := <-c.ops:
			o.done <- opResult{err: errStoreClosed}
		default:
			return
		}
	}
}

func (c *committer) loop() {
	defer c.wg.Done()
	for {
		select {
		case c.slots <- struct{}{}:
		case <-c.stop:
			return
		}
		var first *op
		select {
		case first = <-c.ops:
		case <-c.stop:
			<-c.slots
			return
		}
		batch := []*op{first}
	drain:
		for len(batch) < c.maxOps {
			select {
			case o := <-c.ops:
				batch = append(batch, o)
			default:
				break drain
			}
		}
		c.wg.Add(1)
		go func() {
			defer func() { <-c.slots; c.wg.Done() }()
			c.flush(batch)
		}()
	}
}

// flush runs batch in one transaction, or op by op when that fails.
func (c *committer) flush(batch []*op) {
	ctx, cancel := context.WithTimeout(context.Background(), groupFlushTimeout)
	defer cancel()
	if len(batch) == 1 {
		found, err := runOp(ctx, c.pool, batch[0])
		batch[0].done <- opResult{found, err}
		return
	}
	b := &pgx.Batch{}
	for _, o := range batch {
		for _, s := range o.stmts {
			b.Queue(s.sql, s.args...)
		}
	}
	br := c.pool.SendBatch(ctx, b)
	results := make([]opResult, len(batch))
	var err error
	for i, o := range batch {
		results[i].found, err = readOp(br, o)
		if err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		for _, o := range batch {
			found, err := runOp(ctx, c.pool, o)
			o.done <- opResult{found, err}
		}
		return
	}
	for i, o := range batch {
		o.done <- results[i]
	}
}

// runOp runs one op's statements in one implicit transaction.
func runOp(ctx context.Context, pool *pgxpool.Pool, o *op) (bool, error) {
	b := &pgx.Batch{}
	for _, s := range o.stmts {
		b.Queue(s.sql, s.args...)
	}
	br := pool.SendBatch(ctx, b)
	found, err := readOp(br, o)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return found, err
}

// readOp reads the results of one op's statements from br and scans the
// last statement's row, when there is one.
func readOp(br pgx.BatchResults, o *op) (bool, error) {
	for range len(o.stmts) - 1 {
		if _, err := br.Exec(); err != nil {
			return false, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return false, err
	}
	defer rows.Close()
	found := rows.Next()
	if found && o.scan != nil {
		if err := o.scan(rows); err != nil {
			return false, err
		}
	}
	rows.Close()
	return found, rows.Err()
}

// enqueue queues o, or fails when the committer is closed or ctx ends.
func (c *committer) enqueue(ctx context.Context, o *op) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return errStoreClosed
	}
	select {
	case c.ops <- o:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run executes one op (statements, and scan for the last one's row):
// through the committer when the store has one, otherwise directly. It
// reports whether the last statement returned a row.
func (s *Store) run(ctx context.Context, scan func(pgx.Rows) error, stmts ...stmt) (bool, error) {
	o := &op{stmts: stmts, scan: scan}
	if s.group == nil {
		return runOp(ctx, s.pool, o)
	}
	o.done = make(chan opResult, 1)
	if err := s.group.enqueue(ctx, o); err != nil {
		return false, err
	}
	select {
	case r := <-o.done:
		return r.found, r.err
	case <-ctx.Done():
		// The op is already queued and may still commit, exactly like a
		// statement whose context ends after it was sent.
		return false, ctx.Err()
	}
}

// scanRecord returns a scan that reads a job row into *rec.
func scanRecord(rec **JobRecord) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		r, err := scanJob(rows)
		*rec = r
		return err
	}
}
