package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/proc"
)

// ErrExited is returned for a call to a child that has exited.
var ErrExited = errors.New("member: child exited")

// Proc is a running member child process, seen from the parent. Its
// methods are safe for concurrent use; calls are answered in order.
type Proc struct {
	// Spec is what the child was started with.
	Spec Spec
	cmd  *exec.Cmd
	in   io.WriteCloser

	resps    chan Response
	readDone chan struct{} // closed once the child's output has ended
	quit     chan struct{} // closed by Stop: answers are discarded
	exited   chan struct{} // closed once the child has been waited for
	// readErr is set before resps closes.
	readErr error

	mu       sync.Mutex // one call at a time, so answers match requests
	stopOnce sync.Once
	killed   atomic.Bool // by Kill: its exit status is no error
	ready    ReadyInfo   // the first Response's body, set by Ready
	usage    proc.Usage  // the child's rusage, once exited
	waitErr  error
}

// Start starts a child running exe with args (which must make it call
// Serve) and sends it spec. It does not wait for the member to run: see
// Ready. env, when given, is added to the child's environment (e.g.
// GOMEMLIMIT=...).
func Start(exe string, args []string, spec Spec, stderr io.Writer, env ...string) (*Proc, error) {
	cmd := exec.Command(exe, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stderr = stderr
	cmd.SysProcAttr = procAttr()
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("member %d: %w", spec.Member.Index, err)
	}
	// From here the child runs: p is returned even with an error, for
	// the caller to stop.
	p := &Proc{Spec: spec, cmd: cmd, in: in, resps: make(chan Response, 1),
		readDone: make(chan struct{}), quit: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(p.readDone)
		defer close(p.resps)
		sc := newScanner(out)
		for sc.Scan() {
			var r Response
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				p.readErr = fmt.Errorf("member %d: bad response: %w", spec.Member.Index, err)
				// Keep reading, so the child never blocks writing.
				io.Copy(io.Discard, out)
				return
			}
			select {
			case p.resps <- r:
			case <-p.quit:
			}
		}
		p.readErr = scanErr(sc.Err())
		io.Copy(io.Discard, out)
	}()
	go func() {
		// Wait only once the reader is done with out: Wait closes it.
		<-p.readDone
		p.waitErr = cmd.Wait()
		if cmd.ProcessState != nil {
			p.usage = proc.ChildUsage(cmd.ProcessState)
		}
		close(p.exited)
	}()
	return p, p.send(spec)
}

// send writes one line to the child.
func (p *Proc) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) >= MaxLine {
		return ErrTooLong
	}
	_, err = p.in.Write(append(b, '\n'))
	return err
}

// Pid returns the child's process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Ready waits for the child's first answer: its member runs and the cell
// committed a write through it.
func (p *Proc) Ready(ctx context.Context) (Usage, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, err := p.receive(ctx)
	if err != nil {
		return Usage{}, err
	}
	if r.Error != "" {
		return r.Usage, fmt.Errorf("member %d: %s", p.Spec.Member.Index, r.Error)
	}
	if len(r.Body) > 0 {
		if err := json.Unmarshal(r.Body, &p.ready); err != nil {
			return r.Usage, fmt.Errorf("member %d: ready: %w", p.Spec.Member.Index, err)
		}
	}
	return r.Usage, nil
}

// ReadyInfo returns what the child said when it was ready (zero before
// Ready returned).
func (p *Proc) ReadyInfo() ReadyInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

// receive returns the next response, or an error once the child's
// output ends or ctx does.
func (p *Proc) receive(ctx context.Context) (Response, error) {
	select {
	case r, ok := <-p.resps:
		if !ok {
			return Response{}, p.exitErr()
		}
		return r, nil
	case <-ctx.Done():
		return Response{}, ctx.Err()
	}
}

// exitErr describes a child that stopped answering.
func (p *Proc) exitErr() error {
	err := p.readErr
	select {
	case <-p.exited:
		err = errors.Join(err, p.waitErr)
	case <-time.After(time.Second):
	}
	return fmt.Errorf("member %d: %w (%v)", p.Spec.Member.Index, ErrExited, err)
}

// Call sends op with body and decodes the answer's body into out (nil:
// ignored). It returns the child's usage as it answered. A call that ctx
// ends leaves the child out of step: stop it.
func (p *Proc) Call(ctx context.Context, op string, body, out any) (Usage, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	req := Request{Op: op}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Usage{}, err
		}
		req.Body = b
	}
	if err := p.send(req); err != nil {
		return Usage{}, fmt.Errorf("member %d: %s: %w", p.Spec.Member.Index, op, err)
	}
	r, err := p.receive(ctx)
	if err != nil {
		return Usage{}, fmt.Errorf("member %d: %s: %w", p.Spec.Member.Index, op, err)
	}
	if r.Error != "" {
		return r.Usage, fmt.Errorf("member %d: %s: %s", p.Spec.Member.Index, op, r.Error)
	}
	if out != nil && len(r.Body) > 0 {
		if err := json.Unmarshal(r.Body, out); err != nil {
			return r.Usage, fmt.Errorf("member %d: %s: %w", p.Spec.Member.Index, op, err)
		}
	}
	return r.Usage, nil
}

// Kill kills the child at once (SIGKILL, kill -9: its member gets no
// chance to say goodbye, and the kernel closes its sockets) and returns
// without waiting for it to exit; Stop then waits, and does not report
// the kill as an error. A call in flight to the child fails.
func (p *Proc) Kill() error {
	p.killed.Store(true)
	return p.cmd.Process.Kill()
}

// Stop asks the child to stop (its stdin closes: it closes its member
// and exits), kills it if it has not exited within grace, and returns
// what it used over its life (CPU time and peak RSS from its rusage). It
// may be called more than once.
func (p *Proc) Stop(grace time.Duration) (proc.Usage, error) {
	p.stopOnce.Do(func() {
		close(p.quit)
		p.in.Close()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	if p.killed.Load() {
		return p.usage, nil
	}
	return p.usage, p.waitErr
}

// Cell is the member processes of one cell.
type Cell []*Proc

// CellOptions are what StartCell sets beyond its defaults.
type CellOptions struct {
	// Env is added to every child's environment (e.g. GOMEMLIMIT=...).
	Env []string
	// Scale goes into every member's spec (the scale scenario's quota
	// and limits).
	Scale cell.ScaleSpec
}

// StartCell starts one child per member of a side's cell (cell.Members
// of them), each with its own data directory under dir, on free
// loopback ports, and returns once every member runs and the cell has
// committed a write through each; ctx bounds that. On error every child
// started is stopped. opts, at most one, adds to each child's
// environment and spec.
func StartCell(ctx context.Context, exe string, args []string, side, dir string, stderr io.Writer, opts ...CellOptions) (Cell, error) {
	var o CellOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	n := cell.Members
	addrs, err := cell.FreeAddrs(2 * n)
	if err != nil {
		return nil, err
	}
	// The children's output is copied by one goroutine each: they share
	// the writer.
	stderr = SyncWriter(stderr)
	var c Cell
	for i := range n {
		spec := Spec{Side: side, Member: cell.MemberSpec{
			Index: i, PeerAddrs: addrs[:n], ClientAddrs: addrs[n:],
			Dir: filepath.Join(dir, fmt.Sprintf("%s-m%d", side, i)), Scale: o.Scale,
		}}
		if err := os.MkdirAll(spec.Member.Dir, 0o755); err != nil {
			c.Stop(0)
			return nil, err
		}
		p, err := Start(exe, args, spec, stderr, o.Env...)
		if p != nil {
			c = append(c, p)
		}
		if err != nil {
			c.Stop(0)
			return nil, err
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, p := range c {
		wg.Go(func() { _, errs[i] = p.Ready(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Stop(time.Second)
		return nil, err
	}
	return c, nil
}

// Stop stops every child at once (Proc.Stop) and returns their usage by
// member.
func (c Cell) Stop(grace time.Duration) ([]proc.Usage, error) {
	us := make([]proc.Usage, len(c))
	errs := make([]error, len(c))
	var wg sync.WaitGroup
	for i, p := range c {
		wg.Go(func() { us[i], errs[i] = p.Stop(grace) })
	}
	wg.Wait()
	return us, errors.Join(errs...)
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// SyncWriter returns a writer that serializes writes to w: for a writer
// shared by children started apart (Start after StartCell), whose output
// is copied by a goroutine each.
func SyncWriter(w io.Writer) io.Writer {
	if lw, ok := w.(*lockedWriter); ok {
		return lw
	}
	return &lockedWriter{w: w}
}
