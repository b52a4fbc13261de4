package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is a kind of fault the nemesis injects.
type Kind string

// The fault kinds. A kill or a stop takes one process down for the
// fault's length, then starts it again.
const (
	KillWorker     Kind = "kill -9 worker"
	StopWorker     Kind = "SIGTERM worker"
	KillAPI        Kind = "kill -9 api"
	StopAPI        Kind = "SIGTERM api"
	PostgresCut    Kind = "postgres outage"
	BrokerCut      Kind = "rabbitmq connection cut"
	ProviderOutage Kind = "provider outage"
	Storm5xx       Kind = "5xx storm"
	Storm429       Kind = "429 storm"
	LatencySpike   Kind = "latency spike"
	QuotaHalved    Kind = "quota halved"
)

// Kinds lists every fault kind in a fixed order.
var Kinds = []Kind{KillWorker, StopWorker, KillAPI, StopAPI, PostgresCut, BrokerCut,
	ProviderOutage, Storm5xx, Storm429, LatencySpike, QuotaHalved}

// lengths are the shortest and longest length of each kind's fault in a
// 15-minute soak (shorter soaks scale them down).
var lengths = map[Kind][2]time.Duration{
	KillWorker: {3 * time.Second, 10 * time.Second}, StopWorker: {3 * time.Second, 10 * time.Second},
	KillAPI: {2 * time.Second, 8 * time.Second}, StopAPI: {2 * time.Second, 8 * time.Second},
	PostgresCut:    {10 * time.Second, 30 * time.Second},
	BrokerCut:      {5 * time.Second, 20 * time.Second},
	ProviderOutage: {30 * time.Second, 90 * time.Second},
	Storm5xx:       {30 * time.Second, 90 * time.Second},
	Storm429:       {10 * time.Second, 30 * time.Second},
	LatencySpike:   {20 * time.Second, 60 * time.Second},
	QuotaHalved:    {30 * time.Second, 90 * time.Second},
}

// Fault is one fault of the plan: Kind from At for For (after the start of
// the load); Target picks the process of a kill or a stop.
type Fault struct {
	At, For time.Duration
	Kind    Kind
	Target  int
}

func (f Fault) String() string {
	return fmt.Sprintf("%8s +%-6s %s #%d", f.At.Round(time.Second), f.For.Round(time.Second), f.Kind, f.Target)
}

// fullLength is the soak length the fault lengths are set for.
const fullLength = 15 * time.Minute

// Plan is the nemesis's schedule for a soak of length d, a function of
// seed alone: every kind at least 3 times (more in a longer soak), dealt
// at random into bursts of 2 or 3 faults that start within 5 s of each
// other, so that every fault overlaps another; the bursts start at random
// within the first 85% of d and every fault ends before d.
func Plan(seed uint64, d time.Duration) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x50a4))
	scale := min(1, float64(d)/float64(fullLength))
	per := max(3, int(d/(4*time.Minute))) // faults of each kind
	var kinds []Kind
	for range per {
		kinds = append(kinds, Kinds...)
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	var plan []Fault
	for len(kinds) > 0 {
		n := min(len(kinds), 2+rng.IntN(2))
		if len(kinds)-n == 1 {
			n = len(kinds) // no burst of one
		}
		burst := kinds[:n]
		kinds = kinds[n:]
		at := time.Duration(rng.Float64() * 0.85 * float64(d))
		for i, k := range burst {
			lo, hi := lengths[k][0], lengths[k][1]
			length := max(time.Second, time.Duration(scale*float64(lo+time.Duration(rng.Int64N(int64(hi-lo))))))
			start := at
			if i > 0 {
				// Within 5 s of the burst's first, and before it ends.
				start = at + time.Duration(rng.Int64N(int64(min(5*time.Second, plan[len(plan)-i].For))))
			}
			length = min(length, d-start-time.Second)
			plan = append(plan, Fault{At: start, For: max(length, time.Second/2), Kind: k, Target: rng.IntN(3)})
		}
	}
	slices.SortStableFunc(plan, func(a, b Fault) int { return int(a.At - b.At) })
	return plan
}

// Overlaps counts the faults of plan that overlap another.
func Overlaps(plan []Fault) int {
	n := 0
	for i, f := range plan {
		for j, g := range plan {
			if i != j && f.At < g.At+g.For && g.At < f.At+f.For {
				n++
				break
			}
		}
	}
	return n
}

// Counts is the number of faults of each kind in plan.
func Counts(plan []Fault) map[Kind]int {
	c := map[Kind]int{}
	for _, f := range plan {
		c[f.Kind]++
	}
	return c
}
