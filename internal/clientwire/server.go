package clientwire

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// Handler carries out a client's requests on a member. Serve calls its
// methods from several goroutines at once. Every method that takes a
// context must return soon after it ends: Serve waits for them before
// it returns.
type Handler interface {
	// Welcome decides whether to accept a client that authenticated as
	// identity and sent h, and describes the member. Serve fills in the
	// version and the limits. Return a *RefusedError to refuse with a
	// reason (RefuseBusy when the member serves its maximum of clients).
	Welcome(identity string, h *Hello) (*Welcome, error)
	// Propose proposes c to Raft and returns its result once applied.
	// Serve has decoded c and let through only what a client may ask
	// (see CheckCommand); the Handler checks that the sessions c names
	// belong to identity (SessionsNamed lists them) and assigns c.ID.
	Propose(ctx context.Context, identity string, c *command.Command) (*command.Result, error)
	// Read reads at the member: by read index, or from its applied state
	// when r.Serializable.
	Read(ctx context.Context, identity string, r *Read) (*ReadResult, error)
	// Watch runs the watch w, pushing into sink, until ctx ends (the
	// client cancelled the watch, went away or was too slow) or the watch
	// ends by itself. Its error becomes the WatchEnd's code (a
	// *WatchEndError sets it exactly; ctx's error after a cancel is
	// CodeNone).
	Watch(ctx context.Context, identity string, w *WatchStart, sink *WatchSink) error
	// KeepAlive keeps the listed sessions alive if identity owns them, and
	// returns the ack once the leader has heard of them. At most one call
	// per connection runs at a time; keep-alives that arrive meanwhile
	// are coalesced to the newest. An error sends no ack.
	KeepAlive(ctx context.Context, identity string, ka *KeepAlive) (*KeepAliveAck, error)
	// TimeToLive answers for one of identity's sessions how long the
	// cell would still wait before expiring it (protocol version 2).
	TimeToLive(ctx context.Context, identity string, q *TimeToLive) (*TimeToLiveResult, error)
}

// WatchStarter is a Handler that serves a watch without a goroutine of
// the connection's waiting in Watch: Serve calls StartWatch instead,
// which returns at once and calls done once, with what Watch would have
// returned, when the watch has ended (and pushes into sink no more).
// A member holding many quiet watches then pays no stack for each.
type WatchStarter interface {
	StartWatch(ctx context.Context, identity string, w *WatchStart, sink *WatchSink, done func(error))
}

// Limits bound what one client connection may cost its member. Zero
// fields take the defaults.
type Limits struct {
	// MaxFrame is the longest frame read from the client (default
	// DefaultMaxFrame, at least MinMaxFrame).
	MaxFrame int
	// MaxInFlight is how many requests of the client run at once
	// (default 64); more are answered ErrTooManyRequests at once.
	MaxInFlight int
	// MaxWatchers is how many watches the client may keep open (default
	// 256); more are answered ErrTooManyWatchers.
	MaxWatchers int
	// WatchQueue is how many frames of one watch may wait unwritten
	// (default 64): beyond, the watch ends with CodeSlowWatcher.
	WatchQueue int
	// WatchQueueBytes is how many bytes of one watch's frames may wait
	// unwritten (default a quarter of QueueBytes): a watch that has that
	// many queued ends with CodeSlowWatcher at its next frame. A watch
	// with nothing queued may always queue a frame.
	WatchQueueBytes int
	// QueueBytes bounds the bytes queued for the client unwritten,
	// frames being written included (default DefaultQueueBytes, and at
	// least twice the connection's send limit, so a frame always fits).
	// A watch's frame finds at most three quarters of it queued, else
	// its watch ends with CodeSlowWatcher; any other frame that does not
	// fit cuts the connection (ErrSlowReader): a client that does not
	// read is cut off, never buffered without bound. Replies also stop
	// the reading of requests while they hold half of it.
	QueueBytes int
	// Budget, when set, bounds the bytes queued across every connection
	// that shares it, as QueueBytes bounds one (see Budget); nil = no
	// bound beyond QueueBytes.
	Budget *Budget
	// HandshakeTimeout bounds the wait for the Hello (default 10s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that sent nothing for that long
	// (ErrIdle); 0 = never. Clients with sessions send keep-alives,
	// others Ping.
	IdleTimeout time.Duration
	// IOTimeout bounds a stalled peer: a frame the client started must
	// arrive whole (else ErrIdle), and every write to it complete (else
	// ErrSlowReader), within IOTimeout plus its size at 1 MiB/s. 0 =
	// unbounded.
	IOTimeout time.Duration
	// ErrorCode maps a Handler's error to its wire code (the root
	// package's sentinels to theirs). nil, or CodeNone from it: *Error
	// keeps its code, a context error is CodeCanceled, anything else
	// CodeUnknown.
	ErrorCode func(error) Code
	// Logger receives a line per connection closed for a violation
	// (default slog.Default()).
	Logger *slog.Logger
}

func (l Limits) withDefaults() Limits {
	if l.MaxFrame == 0 {
		l.MaxFrame = DefaultMaxFrame
	}
	l.MaxFrame = max(l.MaxFrame, MinMaxFrame)
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = 64
	}
	if l.MaxWatchers <= 0 {
		l.MaxWatchers = 256
	}
	if l.WatchQueue <= 0 {
		l.WatchQueue = 64
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = 10 * time.Second
	}
	if l.QueueBytes <= 0 {
		l.QueueBytes = DefaultQueueBytes
	}
	if l.Logger == nil {
		l.Logger = slog.Default()
	}
	return l
}

// WatchEndError ends a watch with an exact WatchEnd (a compacted start
// revision carries CompactRev).
type WatchEndError struct {
	Code       Code
	Message    string
	CompactRev int64
}

// Error describes the end.
func (e *WatchEndError) Error() string {
	return fmt.Sprintf("clientwire: watch ended (code %d): %s", e.Code, e.Message)
}

// Serve speaks the protocol to one client over conn, whose transport
// authenticated the peer as identity, until ctx ends, the client goes
// away or breaks the protocol. It closes conn and returns only once
// every goroutine it started (and every Handler call) has returned. The
// error says why it ended: nil for a clean end (ctx, or the client
// closed), ErrProtocol, ErrFrameTooLarge or ErrVersion for a violation,
// a *RefusedError when the handshake was refused, else the I/O error.
//
// When ctx ends, the connection is closed at once, whatever the client
// does (it need not read: no write is waited for), so Serve returns
// within the time its Handler calls take to see ctx end. A client that
// is cut off for not reading ends it with ErrSlowReader, one that went
// idle or left a frame unfinished with ErrIdle.
func Serve(ctx context.Context, conn net.Conn, identity string, h Handler, lim Limits) error {
	lim = lim.withDefaults()
	defer hardClose(conn)
	// Closing the connection is what unblocks the reader, and a writer
	// the client does not read, when ctx ends.
	stop := context.AfterFunc(ctx, func() { hardClose(conn) })
	defer stop()
	fr := newFrameReader(conn)
	hello, w, err := serverHandshake(conn, fr, identity, h, lim)
	if err != nil {
		if ctx.Err() != nil && !errors.As(err, new(*RefusedError)) {
			return nil
		}
		return err
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	// The member sends no frame longer than its own limit, whatever the
	// client says it accepts.
	send := min(int(hello.MaxFrame), lim.MaxFrame)
	qlim := max(lim.QueueBytes, 2*send)
	wlim := lim.WatchQueueBytes
	if wlim <= 0 {
		wlim = qlim / 4
	}
	s := &session{
		h: h, id: identity, conn: conn, lim: lim, hello: hello, ctx: ctx, cancel: cancel,
		out: newOutQueue(conn, w.Version, send, queueBounds{
			limit: qlim, streamLimit: qlim * 3 / 4, writeTimeout: lim.IOTimeout,
			budget: cmp.Or(lim.Budget, NewBudget(0)),
		}),
		slots:      make(chan struct{}, 2*lim.MaxInFlight),
		replyLimit: int64(qlim / 2),
		watchLimit: wlim,
		freed:      make(chan struct{}, 1),
		kaSlot:     make(chan *KeepAlive, 1),
		requests:   make(map[uint64]context.CancelFunc),
		watches:    make(map[uint64]*WatchSink),
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.out.run(); err != nil {
			cancel()
		}
	})
	wg.Go(s.keepAlives)
	err = s.readLoop(fr, w.Version)
	// Nothing more is read or written: what is still queued is dropped,
	// and a writer blocked on a client that does not read is released.
	s.out.close()
	hardClose(conn)
	cancel()
	s.stopWatches()
	s.tasks.Wait()
	wg.Wait()
	if cut := s.out.err(); errors.Is(cut, ErrSlowReader) {
		lim.Logger.Debug("clientwire: client cut off", "client", identity, "err", cut)
		return cut
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrProtocol) || errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrVersion):
		lim.Logger.Warn("clientwire: closing client connection", "client", identity, "err", err)
		return err
	case errors.Is(err, ErrIdle):
		lim.Logger.Debug("clientwire: closing client connection", "client", identity, "err", err)
		return err
	}
	if parent.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// serverHandshake reads the Hello and answers Welcome or Refuse, writing
// directly: nothing else runs yet.
func serverHandshake(conn net.Conn, fr *frameReader, identity string, h Handler, lim Limits) (*Hello, *Welcome, error) {
	_ = conn.SetDeadline(time.Now().Add(lim.HandshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	f, err := fr.read(handshakeMaxFrame)
	if err != nil {
		return nil, nil, err
	}
	if f.Kind != KindHello {
		return nil, nil, fmt.Errorf("%w: first frame of kind %d, not Hello", ErrProtocol, f.Kind)
	}
	if err := checkFrame(f, 0); err != nil {
		return nil, nil, err
	}
	m, err := DecodeMessage(f.Kind, f.Payload)
	if err != nil {
		return nil, nil, err
	}
	hello := m.(*Hello)
	refuse := func(r *RefusedError) (*Hello, *Welcome, error) {
		b, _ := AppendFrame(nil, handshakeVersion, 0, &Refuse{Reason: r.Reason, Message: r.Message}, handshakeMaxFrame)
		_, _ = conn.Write(b)
		return nil, nil, r
	}
	v := min(hello.MaxVersion, MaxVersion)
	if v < hello.MinVersion || v < MinVersion {
		return refuse(&RefusedError{Reason: RefuseVersion, Message: fmt.Sprintf(
			"member speaks versions %d to %d, client %d to %d", MinVersion, MaxVersion, hello.MinVersion, hello.MaxVersion)})
	}
	if hello.MaxFrame < MinMaxFrame {
		return refuse(&RefusedError{Reason: RefuseForbidden, Message: fmt.Sprintf("client frame limit %d below %d", hello.MaxFrame, MinMaxFrame)})
	}
	w, err := h.Welcome(identity, hello)
	if err != nil {
		var r *RefusedError
		if !errors.As(err, &r) {
			r = &RefusedError{Reason: RefuseNotReady, Message: err.Error()}
		}
		return refuse(r)
	}
	w.Version = v
	w.MaxFrame, w.MaxInFlight, w.MaxWatchers = uint32(lim.MaxFrame), uint32(lim.MaxInFlight), uint32(lim.MaxWatchers)
	b, err := AppendFrame(nil, handshakeVersion, 0, w, handshakeMaxFrame)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.Write(b); err != nil {
		return nil, nil, err
	}
	return hello, w, nil
}
