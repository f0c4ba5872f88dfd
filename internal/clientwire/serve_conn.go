package clientwire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// ErrWatchEnded is what a WatchSink returns once its watch is ending (the
// client cancelled it or fell behind, or the connection is closing): the
// Handler's Watch should return.
var ErrWatchEnded = errors.New("clientwire: watch ended")

// session is the member's state of one client connection.
type session struct {
	h      Handler
	id     string
	conn   net.Conn
	lim    Limits
	hello  *Hello
	ctx    context.Context
	cancel context.CancelFunc
	out    *outQueue
	// slots bounds the replies queued unwritten: the reader takes one
	// before it handles a request, the writer gives it back once the
	// reply is written. A client that sends without reading stops being
	// read, so it slows itself, not the member. replyBytes counts the
	// bytes of those replies queued: the reader also waits while they
	// reach replyLimit (freed says some were written), so replies are
	// bounded in bytes, not only in number.
	slots      chan struct{}
	replyBytes atomic.Int64
	replyLimit int64
	freed      chan struct{}
	// watchLimit bounds the bytes of one watch's frames queued.
	watchLimit int
	// kaSlot holds the newest keep-alive not yet handled.
	kaSlot chan *KeepAlive
	tasks  sync.WaitGroup

	mu       sync.Mutex
	requests map[uint64]context.CancelFunc
	watches  map[uint64]*WatchSink
}

// release gives back a reply's slot and its n bytes.
func (s *session) release(n int) {
	s.replyBytes.Add(-int64(n))
	<-s.slots
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// acquire takes a reply slot, waiting while the client does not read:
// while every slot is taken, or the replies queued hold replyLimit
// bytes.
func (s *session) acquire() error {
	select {
	case s.slots <- struct{}{}:
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
	for s.replyBytes.Load() >= s.replyLimit {
		select {
		case <-s.freed:
		case <-s.ctx.Done():
			<-s.slots
			return s.ctx.Err()
		}
	}
	return nil
}

// reply queues the response to request id; the slot is released once it
// is written. A response too long for the client becomes an error.
func (s *session) reply(id uint64, m Message) {
	n, err := s.out.push(id, m, s.release)
	if errors.Is(err, ErrFrameTooLarge) {
		n, err = s.out.push(id, &ErrorMsg{Code: CodeFrameTooLarge, Message: err.Error()}, s.release)
	}
	switch {
	case err == nil:
		// Counted after the push, so the release may come first: the
		// count dips below its true value for that instant only.
		s.replyBytes.Add(int64(n))
	case !errors.Is(err, ErrConnClosed):
		s.release(0)
	}
}

func (s *session) replyErr(id uint64, err error) {
	s.reply(id, &ErrorMsg{Code: s.code(err), Message: err.Error()})
}

// code maps a Handler's error to its wire code.
func (s *session) code(err error) Code {
	if s.lim.ErrorCode != nil {
		if c := s.lim.ErrorCode(err); c != CodeNone {
			return c
		}
	}
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, ErrForbidden):
		return CodeForbidden
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return CodeCanceled
	}
	return CodeUnknown
}

// readLoop reads and handles the client's frames until the connection
// fails. Between frames the read deadline is the idle timeout; once a
// frame has started, the I/O timeout plus its size at minWriteRate (set
// only when the frame has not all arrived with its length, so most
// frames cost one deadline).
func (s *session) readLoop(fr *frameReader, version uint8) error {
	mid := false // the deadline is a frame's, not the idle one
	if t := s.lim.IOTimeout; t > 0 {
		fr.started = func(n int) {
			mid = true
			_ = s.conn.SetReadDeadline(time.Now().Add(t + time.Duration(n)*time.Second/minWriteRate))
		}
	}
	for {
		switch {
		case s.lim.IdleTimeout > 0:
			_ = s.conn.SetReadDeadline(time.Now().Add(s.lim.IdleTimeout))
		case mid:
			_ = s.conn.SetReadDeadline(time.Time{})
		}
		mid = false
		f, err := fr.read(s.lim.MaxFrame)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if mid {
				return fmt.Errorf("%w: a frame unfinished after the I/O timeout %v: %w", ErrIdle, s.lim.IOTimeout, err)
			}
			return fmt.Errorf("%w: nothing received for %v: %w", ErrIdle, s.lim.IdleTimeout, err)
		}
		if err != nil {
			return err
		}
		if err := checkFrame(f, version); err != nil {
			return err
		}
		m, err := DecodeMessage(f.Kind, f.Payload)
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *Ping:
			if err := s.acquire(); err != nil {
				return err
			}
			s.reply(f.ID, &Pong{})
		case *Propose:
			err = s.propose(f.ID, m, version)
		case *Read:
			err = s.request(f.ID, func(ctx context.Context) (Message, error) {
				return s.h.Read(ctx, s.id, m)
			})
		case *WatchStart:
			err = s.startWatch(f.ID, m)
		case *TimeToLive:
			err = s.request(f.ID, func(ctx context.Context) (Message, error) {
				return s.h.TimeToLive(ctx, s.id, m)
			})
		case *Members:
			err = s.members(f.ID)
		case *WatchCancel:
			s.mu.Lock()
			w := s.watches[m.WatchID]
			s.mu.Unlock()
			if w != nil {
				w.stop() // outside the lock: its OnStop hook may end the watch at once
			}
		case *KeepAlive:
			s.offerKeepAlive(m)
		case *Cancel:
			s.mu.Lock()
			if cancel := s.requests[f.ID]; cancel != nil {
				cancel()
			}
			s.mu.Unlock()
		default:
			return fmt.Errorf("%w: kind %d is not sent by clients", ErrProtocol, f.Kind)
		}
		if err != nil {
			return err
		}
	}
}

func (s *session) propose(id uint64, m *Propose, version uint8) error {
	c, err := command.Decode(m.Command)
	if err == nil && version < NestedVersion && nestsCommand(m.Command) {
		// Its result could not travel in this version: refused as a
		// newer client's command is, the connection stays.
		err = fmt.Errorf("%w: nested transactions need protocol version %d, the connection speaks %d",
			command.ErrVersion, NestedVersion, version)
	}
	if errors.Is(err, command.ErrVersion) {
		// A newer client's command: refused, the connection stays.
		if err := s.acquire(); err != nil {
			return err
		}
		s.reply(id, &ErrorMsg{Code: CodeInvalidArgument, Message: err.Error()})
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if err := CheckCommand(c); err != nil {
		if err := s.acquire(); err != nil {
			return err
		}
		s.replyErr(id, err)
		return nil
	}
	c.ID = 0 // the member's own request IDs, not the client's
	return s.request(id, func(ctx context.Context) (Message, error) {
		r, err := s.h.Propose(ctx, s.id, c)
		if err != nil {
			return nil, err
		}
		return &ProposeResult{Result: *r, Nested: hasNested(r.Ops)}, nil
	})
}

// request runs do in its own goroutine, within the in-flight limit.
func (s *session) request(id uint64, do func(context.Context) (Message, error)) error {
	if err := s.acquire(); err != nil {
		return err
	}
	s.mu.Lock()
	if _, dup := s.requests[id]; dup {
		s.mu.Unlock()
		s.release(0)
		return fmt.Errorf("%w: request ID %d already in flight", ErrProtocol, id)
	}
	if len(s.requests) >= s.lim.MaxInFlight {
		s.mu.Unlock()
		s.reply(id, &ErrorMsg{Code: CodeTooManyRequests,
			Message: fmt.Sprintf("%d requests in flight, the member's limit", s.lim.MaxInFlight)})
		return nil
	}
	ctx, cancel := context.WithCancel(s.ctx)
	s.requests[id] = cancel
	s.mu.Unlock()
	s.tasks.Go(func() {
		defer cancel()
		m, err := do(ctx)
		s.mu.Lock()
		delete(s.requests, id)
		s.mu.Unlock()
		if err != nil {
			s.replyErr(id, err)
			return
		}
		s.reply(id, m)
	})
	return nil
}

// offerKeepAlive leaves ka for the keep-alive goroutine. One it has not
// taken yet is merged into ka, not dropped: a client sends keep-alives of
// only its new sessions between its regular ones of all of them, so a
// newer keep-alive need not list what an older one did (dropping a
// regular one behind a burst of new sessions' left every session it
// listed unconfirmed until it expired). The merge answers under ka's Seq,
// the newer send time: a batch composed after ka arrived confirms that
// time for every session it carries. A merge that would list more IDs
// than one frame can keeps ka alone; the client's next regular
// keep-alive lists the rest. Only the reader sends here.
func (s *session) offerKeepAlive(ka *KeepAlive) {
	for {
		select {
		case s.kaSlot <- ka:
			return
		default:
		}
		select {
		case older := <-s.kaSlot:
			ka = mergeKeepAlives(ka, older, MaxKeepAliveIDs)
		default:
		}
	}
}

// mergeKeepAlives returns ka listing older's sessions too, each once (in
// ascending order), or ka as it is if together they would list more
// than limit IDs. It sorts rather than hashes: nothing is sized by what
// a client claims beyond the IDs it sent.
func mergeKeepAlives(ka, older *KeepAlive, limit int) *KeepAlive {
	if len(ka.SessionIDs)+len(older.SessionIDs) > limit {
		return ka
	}
	ids := append(slices.Clip(ka.SessionIDs), older.SessionIDs...)
	slices.Sort(ids)
	return &KeepAlive{Seq: ka.Seq, SessionIDs: slices.Compact(ids)}
}

// keepAlives hands keep-alives to the Handler one at a time, and waits
// for each ack to be written before the next, so acks never pile up
// for a client that does not read.
func (s *session) keepAlives() {
	written := make(chan struct{}, 1)
	written <- struct{}{}
	for {
		var ka *KeepAlive
		select {
		case <-s.ctx.Done():
			return
		case ka = <-s.kaSlot:
		}
		ack, err := s.h.KeepAlive(s.ctx, s.id, ka)
		if err != nil {
			if s.ctx.Err() == nil {
				s.lim.Logger.Debug("clientwire: keep-alive failed", "client", s.id, "err", err)
			}
			continue
		}
		select {
		case <-s.ctx.Done():
			return
		case <-written:
		}
		ack.Seq = ka.Seq
		if _, err := s.out.push(0, ack, func(int) { written <- struct{}{} }); err != nil && !errors.Is(err, ErrConnClosed) {
			s.lim.Logger.Warn("clientwire: keep-alive ack not sent", "client", s.id, "err", err)
			written <- struct{}{}
		}
	}
}
