package shaping

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPacer(t *testing.T) {
	t.Parallel()
	p := NewPacer(100 * time.Millisecond)
	require.Equal(t, t0, p.ReserveAt(t0))
	require.Equal(t, sec(0.1), p.ReserveAt(t0))
	at := p.ReserveAt(t0)
	require.Equal(t, sec(0.2), at)
	p.CancelAt(at)
	require.Equal(t, sec(0.2), p.ReserveAt(sec(0.05)))
	require.Equal(t, sec(1), p.ReserveAt(sec(1)))
}
