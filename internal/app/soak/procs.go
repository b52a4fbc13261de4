package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one llmq process of the soak (a worker or an API replica): it
// runs the soak's own binary with args, restarts after each kill or stop
// the nemesis makes, and keeps its log, the count of its log lines per
// second and its peak RSS across its lives.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	log  *os.File

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current life ends
	down    bool          // taken down by the nemesis
	starts  int
	unasked int // exits the nemesis did not cause
	peakKB  int64
	// lines counts log lines per second since the soak began.
	lines map[int64]int
	begin time.Time
}

func newProc(dir, name, bin string, args, env []string, begin time.Time) (*proc, error) {
	f, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	return &proc{name: name, bin: bin, args: args, env: env, log: f, lines: map[int64]int{}, begin: begin}, nil
}

// start starts a life of the process, unless one runs.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited != nil {
		select {
		case <-p.exited:
		default:
			return nil // running
		}
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.SysProcAttr = childAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("soak: start %s: %w", p.name, err)
	}
	p.cmd, p.down, p.exited = cmd, false, make(chan struct{})
	p.starts++
	exited := p.exited
	go p.copyLog(out, cmd, exited)
	return nil
}

// copyLog copies a life's output to the log, counting its lines, then
// waits for its end.
func (p *proc) copyLog(out io.Reader, cmd *exec.Cmd, exited chan struct{}) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		sec := int64(time.Since(p.begin) / time.Second)
		p.mu.Lock()
		p.lines[sec]++
		_, _ = p.log.Write(append(sc.Bytes(), '\n'))
		p.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, out)
	err := cmd.Wait()
	p.mu.Lock()
	if !p.down {
		p.unasked++
		fmt.Fprintf(p.log, "soak: %s exited unasked: %v\n", p.name, err)
	}
	p.mu.Unlock()
	close(exited)
}

// sample reads the peak RSS of the life running now.
func (p *proc) sample() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil || p.down {
		return
	}
	if kb, err := vmHWM(p.cmd.Process.Pid); err == nil {
		p.peakKB = max(p.peakKB, kb)
	}
}

// takeDown sends sig (SIGKILL or SIGTERM) and waits for the life to end
// (at most grace, then SIGKILL); false when the process was down already
// (another fault holds it: that one restarts it).
func (p *proc) takeDown(sig syscall.Signal, grace time.Duration) bool {
	p.sample()
	p.mu.Lock()
	if p.cmd == nil || p.down {
		p.mu.Unlock()
		return false
	}
	p.down = true
	cmd, exited := p.cmd, p.exited
	fmt.Fprintf(p.log, "soak: %s: %s\n", p.name, sig)
	p.mu.Unlock()
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
	return true
}

// isDown reports whether the nemesis holds the process down.
func (p *proc) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// keepAlive restarts a life that ended unasked (a process that exits by
// itself is counted, and started again after a second) until ctx ends.
func (p *proc) keepAlive(ctx context.Context) {
	for {
		p.mu.Lock()
		exited, down := p.exited, p.down
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-exited:
		}
		if down {
			// The nemesis restarts it.
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		_ = p.start()
	}
}

// stats are a process's figures.
type procStats struct {
	Name    string
	Starts  int
	Unasked int
	PeakMB  float64
	Lines   int
	// MaxLinesPerSec is the most log lines per second over any 10 s.
	MaxLinesPerSec float64
}

func (p *proc) stats() procStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := procStats{Name: p.name, Starts: p.starts, Unasked: p.unasked, PeakMB: float64(p.peakKB) / 1024}
	var last int64
	for sec, n := range p.lines {
		s.Lines += n
		last = max(last, sec)
	}
	for sec := int64(0); sec <= last; sec++ {
		w := 0
		for i := range int64(10) {
			w += p.lines[sec+i]
		}
		s.MaxLinesPerSec = max(s.MaxLinesPerSec, float64(w)/10)
	}
	return s
}

// vmHWM is the peak resident set (kB) of process pid.
func vmHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmHWM")
}
