package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Group-commit defaults (see WithGroupCommit): two flushes in flight, one
// running while the next batch forms, and batches of at most 1,024
// operations. More slots or smaller batches cost Postgres more per job; a
// larger batch makes a (rare) failure dearer. Measurements:
// docs/design/platform.md#group-commit-defaults.
const (
	GroupFlushesDefault = 2
	GroupMaxOpsDefault  = 1024
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
	// row, when set, is the op as one row of its kind's multi-row
	// statement, which replaces all of stmts (the last of them is the op
	// on its own; the one before it, if any, records the answer of the
	// job's previous call: the merged statement records it too).
	row *rowOp
}

// rowOp is an op that a flush may run together with the other ops of its
// kind as one statement over arrays: one UPDATE of hundreds of rows costs
// Postgres a fraction of hundreds of single-row UPDATEs (one executor
// start, one plan, one message; measured by BenchmarkPipeline's
// pg-µs/job, docs/design/platform.md).
type rowOp struct {
	kind *rowKind
	// key is the job the op changes: a flush merges one op per key, so
	// each returned row answers exactly one op.
	key Key
	// dest receives the returned row's columns after the ordinal.
	dest []any
	// answer, when set, is the answer to the job's previous call, which
	// the merged statement records (answersCTE).
	answer *Answer
}

// rowKind is a statement over many ops: sql reads
// unnest($1::t1[], ..., $k::tk[]) WITH ORDINALITY AS u(c1, ..., ck, n),
// column i from the i-th argument of each op's own statement, and returns
// u.n (the op's 1-based position) first, then the columns of rowOp.dest,
// for the rows it changed; args turns the ops' arguments into its typed
// arrays (with column). When some of the ops carry an answer, answered
// is sql that records them too (withAnswers: answersCTE from $k+1, over
// answerArrays), so a flush sends one statement per kind, not one more
// per answer besides.
type rowKind struct {
	sql, answered string
	args          func(ops []*op) []any
}

// newRowKind is the kind of statement sql over k arrays (args).
func newRowKind(sql string, k int, args func(ops []*op) []any) *rowKind {
	return &rowKind{sql: sql, answered: withAnswers(sql, k+1), args: args}
}

// queue adds the statement of ops, a group of this kind, to b.
func (k *rowKind) queue(b *pgx.Batch, ops []*op) {
	for _, o := range ops {
		if o.row.answer != nil {
			b.Queue(k.answered, append(k.args(ops), answerArrays(ops)...)...)
			return
		}
	}
	b.Queue(k.sql, k.args(ops)...)
}

// column collects argument i of ops' own (last) statements as one array
// for pgx (a nil argument is T's zero value: NULL for a slice).
func column[T any](ops []*op, i int) []T {
	out := make([]T, len(ops))
	for j, o := range ops {
		out[j], _ = o.stmts[len(o.stmts)-1].args[i].(T)
	}
	return out
}

type opResult struct {
	found bool
	err   error
}

// committer runs the hot-path writes of many goroutines (claims and state
// changes) as one pipelined batch per transaction, so that hundreds of jobs
// share one WAL flush. Batches form by themselves while every flush slot is
// busy; no op waits for a timer. A failed batch wrote nothing, and its ops
// run again one by one (docs/design/platform.md#the-group-committer).
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
	merged, single := mergeOps(batch)
	b := &pgx.Batch{}
	for _, m := range merged {
		m[0].row.kind.queue(b, m)
	}
	for _, o := range single {
		for _, s := range o.stmts {
			b.Queue(s.sql, s.args...)
		}
	}
	br := c.pool.SendBatch(ctx, b)
	results := make(map[*op]opResult, len(batch))
	var err error
	for _, m := range merged {
		if err = readMerged(br, m, results); err != nil {
			break
		}
	}
	for _, o := range single {
		if err != nil {
			break
		}
		var r opResult
		r.found, err = readOp(br, o)
		results[o] = r
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
	for _, o := range batch {
		o.done <- results[o]
	}
}

// mergeOps sorts a batch into groups of row ops of one kind and distinct
// keys, each to run as one statement, and the ops that run on their own
// (not row ops, or a second op of a key already in its kind's group).
func mergeOps(batch []*op) (merged [][]*op, single []*op) {
	groups := map[*rowKind]int{}
	seen := map[rowKey]bool{}
	for _, o := range batch {
		if o.row == nil || seen[rowKey{o.row.kind, o.row.key}] {
			single = append(single, o)
			continue
		}
		seen[rowKey{o.row.kind, o.row.key}] = true
		i, ok := groups[o.row.kind]
		if !ok {
			i = len(merged)
			groups[o.row.kind] = i
			merged = append(merged, nil)
		}
		merged[i] = append(merged[i], o)
	}
	return merged, single
}

type rowKey struct {
	kind *rowKind
	key  Key
}

// readMerged reads the rows of ops' merged statement: each row answers
// the op at its ordinal (found); the ops without a row are not found.
func readMerged(br pgx.BatchResults, ops []*op, results map[*op]opResult) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for _, o := range ops {
		results[o] = opResult{}
	}
	// The ordinal first (nil skips a column), then the op's columns.
	var n int64
	first := make([]any, 1+len(ops[0].row.dest))
	first[0] = &n
	for rows.Next() {
		if err := rows.Scan(first...); err != nil {
			return err
		}
		if n < 1 || n > int64(len(ops)) {
			return fmt.Errorf("store: merged statement returned ordinal %d of %d rows", n, len(ops))
		}
		o := ops[n-1]
		if err := rows.Scan(append([]any{nil}, o.row.dest...)...); err != nil {
			return err
		}
		results[o] = opResult{found: true}
	}
	return rows.Err()
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
func (s *base) run(ctx context.Context, scan func(pgx.Rows) error, stmts ...stmt) (bool, error) {
	return s.do(ctx, &op{stmts: stmts, scan: scan})
}

// do executes op o (see run).
func (s *base) do(ctx context.Context, o *op) (bool, error) {
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
