package shaping

import (
	"fmt"
	"math"
	"time"
)

// A quota bucket (a tenant's or a project's, docs/design/tenants.md) is
// a plain [Bucket] passed in [Request.Quotas]: the lane reserves it with
// its own buckets, all or none, and its permit settles it. What a
// scheduler in front of the lanes needs besides: to know, without
// reserving, whether the bucket admits a request now (so a request its
// quota holds does not block the lane for the others), how many requests
// it admits soon (so it claims no more), and to run it on a replica's
// share of the quota.

// ReadyFor is when n tokens would be covered in b if reserved at now
// (now when at once); it reserves nothing. It fails with [ErrTooLarge]
// when b can never hold n.
func (b *Bucket) ReadyFor(now time.Time, n float64) (time.Time, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ready, imm, err := b.peekLocked(now, n)
	if err != nil {
		return time.Time{}, err
	}
	return b.readyTime(ready, imm, now), nil
}

// HeadroomAt is how many requests of cost b could take between now and
// now+horizon: its level plus its refill, over cost (see
// [Lane.HeadroomAt]). It reserves nothing.
func (b *Bucket) HeadroomAt(now time.Time, horizon time.Duration, cost float64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.headroomLocked(now, now.Add(max(0, horizon)), cost)
}

// ShareAt runs b on share of a quota of limit tokens per period (its
// configured Limit, before any share): the refill and the capacity become
// share x limit from now on, while the largest reservation stays limit (a
// request above the share's capacity waits for a full bucket and leaves it
// in debt, rather than failing for good). For quota buckets that replicas
// divide (docs/design/replicas.md); a lane's own buckets follow
// [Lane.SetShareAt].
func (b *Bucket) ShareAt(now time.Time, limit, share float64) error {
	if !(share > 0 && share <= 1) || !(limit > 0) || math.IsInf(limit, 0) {
		return fmt.Errorf("%w: bucket %q: share in (0, 1] and limit > 0 required, got %v of %v", ErrInvalidConfig, b.name, share, limit)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.rel(now)
	b.advance(s)
	if rate := share * limit / b.per.Seconds(); rate != b.rate {
		b.rate = rate
		b.fixes++
	}
	b.setCapacity(share*limit, limit)
	return nil
}
