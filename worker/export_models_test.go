package worker

// LaneLimit is the per-minute limit (bucket "rpm" or "tpm") of model's
// lane (of a model without a pool) on this worker's share; false when the
// worker has no such lane or bucket.
func (w *Worker) LaneLimit(model, bucket string) (float64, bool) {
	l, ok := w.lanes.get(laneName(model, ""))
	if !ok {
		return 0, false
	}
	for _, b := range l.shaper.Snapshot().Buckets {
		if b.Name == bucket {
			return b.Limit, true
		}
	}
	return 0, false
}
