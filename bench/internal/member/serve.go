package member

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/proc"
)

// Service is what a child serves beside its member: the load of a soak
// or of a bench scenario. Handle is called for one Request at a time.
type Service interface {
	// Handle does op with body and returns the Response's body.
	Handle(ctx context.Context, op string, body json.RawMessage) (any, error)
	// Close stops whatever Handle started; the member closes after it.
	Close() error
}

// Serve is a child's main loop: it reads the Spec from in, opens the
// member with the side's opener, waits until the cell commits a write
// through it, answers, and then serves the Requests that follow with the
// Service newService returns, until in ends (the parent stopped the
// child or died) or ctx ends. Responses go to out.
func Serve(ctx context.Context, in io.Reader, out io.Writer, openers map[string]cell.MemberOpener,
	newService func(m cell.Member) Service) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := make(chan []byte)
	// readErr is written before lines closes and read after.
	var readErr error
	// The reader ends with in; the parent closing in is how a child is
	// told to stop, so it cancels everything. It is not waited for: when
	// ctx ends first it may be blocked reading in, which only its owner
	// can close.
	go func() {
		defer cancel()
		defer close(lines)
		sc := newScanner(in)
		for sc.Scan() {
			select {
			case lines <- append([]byte(nil), sc.Bytes()...):
			case <-ctx.Done():
				return
			}
		}
		readErr = scanErr(sc.Err())
	}()
	enc := json.NewEncoder(out)
	var line []byte
	select {
	case line = <-lines:
	case <-ctx.Done():
	}
	if line == nil {
		return errors.New("member: no spec from the parent")
	}
	var spec Spec
	if err := json.Unmarshal(line, &spec); err != nil {
		return fmt.Errorf("member: spec: %w", err)
	}
	open, ok := openers[spec.Side]
	if !ok {
		return fmt.Errorf("member: unknown side %q", spec.Side)
	}
	start := time.Now()
	m, err := open(ctx, spec.Member)
	var ready ReadyInfo
	ready.OpenSeconds = time.Since(start).Seconds()
	// A joining member may be a learner, which takes no writes: it is
	// ready once it runs, and its caller watches it catch up.
	if err == nil && !spec.Member.Join {
		err = cell.AwaitMemberWrite(ctx, m)
		if err != nil {
			err = fmt.Errorf("member %d: no write committed: %w", spec.Member.Index, err)
		}
		ready.AwaitSeconds = time.Since(start).Seconds() - ready.OpenSeconds
	}
	if err != nil {
		enc.Encode(response(nil, err))
		if m != nil {
			m.Close()
		}
		return err
	}
	svc := newService(m)
	defer func() {
		err = errors.Join(err, svc.Close(), m.Close())
	}()
	if err := enc.Encode(response(ready, nil)); err != nil {
		return err
	}
	for {
		var line []byte
		select {
		case l, ok := <-lines:
			if !ok {
				return readErr
			}
			line = l
		case <-ctx.Done():
			return nil
		}
		var req Request
		var body any
		err := json.Unmarshal(line, &req)
		if err == nil {
			body, err = svc.Handle(ctx, req.Op, req.Body)
		}
		if err := enc.Encode(response(body, err)); err != nil {
			return err
		}
	}
}

// response builds a Response with this process's usage.
func response(body any, err error) Response {
	r := Response{Usage: SelfUsage()}
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if body != nil {
		b, merr := json.Marshal(body)
		if merr != nil {
			r.Error = merr.Error()
			return r
		}
		r.Body = b
	}
	return r
}

// SelfUsage returns this process's usage.
func SelfUsage() Usage {
	u := Usage{CPUSeconds: proc.CPU().Seconds()}
	if mem, err := proc.ReadMemory(); err == nil {
		u.RSS, u.PeakRSS = mem.RSS, mem.PeakRSS
	}
	return u
}

func newScanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	return sc
}

func scanErr(err error) error {
	if errors.Is(err, bufio.ErrTooLong) {
		return ErrTooLong
	}
	return err
}
