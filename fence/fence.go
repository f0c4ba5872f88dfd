package fence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// Token is a fencing token: the cell revision at which a lock or a
// leadership was granted. Every grant in a cell carries a token strictly
// greater than every earlier grant's, so a resource that remembers the
// highest token it has admitted (a Fence) can refuse the writes of a
// holder that has since lost its lock, however late they arrive.
//
// The zero Token means "no token"; valid tokens are positive.
type Token int64

// String returns t in decimal, the form ParseToken reads and TokenHeader
// carries.
func (t Token) String() string {
	return strconv.FormatInt(int64(t), 10)
}

// ParseToken reads a token in the form String writes: a positive decimal
// integer, ASCII digits only, without sign, spaces or leading zeros, that
// fits in an int64. Anything else gives an error wrapping ErrInvalidToken.
func ParseToken(s string) (Token, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: %.32q is not a decimal number", ErrInvalidToken, s)
		}
	}
	if s[0] == '0' {
		return 0, fmt.Errorf("%w: %.32q is zero or has a leading zero", ErrInvalidToken, s)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %.32q is out of range", ErrInvalidToken, s)
	}
	return Token(v), nil
}

// MarkStore keeps a resource's high-water marks: for each resource name,
// the highest token admitted so far (0 for a resource never seen). A Fence
// keeps its marks in one; NewMemMarks and OpenFileMarks make the two
// provided kinds, and a resource with its own storage (a database table,
// say) can implement it there.
//
// Implementations must be safe for concurrent use by multiple goroutines,
// and Raise must be atomic per resource: two concurrent Raises on one
// resource behave as if one ran entirely before the other. A durable
// store must have a changed mark on stable storage before Raise returns.
type MarkStore interface {
	// Raise sets the resource's mark to t if t >= the current mark, and
	// returns the mark as it is after the call: t was admitted exactly
	// when the returned mark equals t (and t > 0). Marks never decrease.
	// Raise(resource, 0) changes nothing and reports the current mark;
	// Fence.Mark relies on that. On error the mark is unchanged, or
	// changed durably; the caller must treat t as not admitted.
	Raise(resource string, t Token) (Token, error)
}

// NewMemMarks returns a MarkStore that keeps marks in memory, so they are
// lost when the process ends: a resource that restarts then admits a
// stale token it had already refused. Use it for resources whose state
// does not outlive the process either, and in tests; use OpenFileMarks
// (or the resource's own storage) otherwise. It is safe for concurrent
// use by multiple goroutines.
func NewMemMarks() MarkStore {
	return &memMarks{marks: map[string]Token{}}
}

type memMarks struct {
	mu    sync.Mutex
	marks map[string]Token
}

func (m *memMarks) Raise(resource string, t Token) (Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mark := m.marks[resource]
	if t > mark {
		m.marks[resource] = t
		mark = t
	}
	return mark, nil
}

// Fence is the resource side of fencing: it admits a write only if the
// writer's token is at least the highest token it has admitted for that
// resource, so once a newer holder has written, an older holder (one that
// lost its lock while paused, partitioned or slow) is refused with
// ErrStaleToken.
//
// Admit is the bare check; Do and Middleware also order the writes
// themselves (see Do). Resources are independent: each name has its own
// mark, and Do keeps a few words of memory per resource it has seen.
// A Fence is safe for concurrent use by multiple goroutines. Create one
// with NewFence; the zero value is usable too (it keeps its marks in
// memory).
type Fence struct {
	store MarkStore

	mu    sync.Mutex
	gates map[string]*gate // Do's per-resource ordering; see enter
}

// gate orders the writes that Do runs for one resource: writes under one
// token run concurrently, and a higher token's writes start only once
// every write under a lower token has returned.
type gate struct {
	cur  Token         // the token whose writes were admitted last
	want Token         // a higher token waiting for cur's writes to end; 0 = none
	n    int           // writes running under cur
	idle chan struct{} // closed when n drops to 0; nil while nobody waits
}

// NewFence returns a Fence keeping its marks in store; nil means
// NewMemMarks(). Several Fences may share a store: Admit stays correct
// across them, while Do and Middleware order the writes of their own
// Fence only.
func NewFence(store MarkStore) *Fence {
	if store == nil {
		store = NewMemMarks()
	}
	return &Fence{store: store, gates: map[string]*gate{}}
}

// Admit admits t for resource: it returns nil and raises the resource's
// mark to t when t is at least the mark (so the same holder may write
// again with the same token), and an error wrapping ErrStaleToken, naming
// the token and the mark, when t is lower. A t <= 0 gives ErrInvalidToken.
// Admit is atomic: among concurrent calls on one resource, a token is
// never admitted after a higher one has been.
//
// Admit only checks and raises the mark; it does not order the write that
// follows. If the writes themselves can run concurrently, an admitted
// write that is slow may land after a newer holder's write. Either make
// Admit and the write one critical section of the resource, or use Do,
// which orders them.
func (f *Fence) Admit(resource string, t Token) error {
	if t <= 0 {
		return fmt.Errorf("%w: %d is not positive", ErrInvalidToken, int64(t))
	}
	mark, err := f.marks().Raise(resource, t)
	if err != nil {
		return err
	}
	switch {
	case mark > t:
		return staleErr(resource, t, mark)
	case mark < t:
		return fmt.Errorf("%w: mark store returned mark %d for %q after raising it to %d",
			ErrMarkStore, int64(mark), resource, int64(t))
	}
	return nil
}

// marks returns the store, giving a zero Fence an in-memory one.
func (f *Fence) marks() MarkStore {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.store == nil {
		f.store = NewMemMarks()
	}
	return f.store
}

func staleErr(resource string, t, mark Token) error {
	return fmt.Errorf("%w: token %d for %q is below its mark %d", ErrStaleToken, int64(t), resource, int64(mark))
}

// Mark returns the highest token admitted for resource so far (0 if
// none), as the store reports it.
func (f *Fence) Mark(resource string) (Token, error) {
	return f.marks().Raise(resource, 0)
}

// Do admits t for resource as Admit does and, if admitted, runs write as
// a fenced write, returning its error. Do also orders the writes it runs
// on one resource: writes under the same token run concurrently, but a
// write under a higher token starts only after every write this Fence
// admitted under a lower token has returned, and once it has started no
// write under a lower token starts (they fail with ErrStaleToken). So the
// resource sees the holders' writes in token order, even when an old
// holder's write was admitted just before a new holder's.
//
// While it waits for older writes to return, Do gives up when ctx ends,
// returning an error wrapping ctx.Err() without running write (the mark
// stays raised). Do is safe for concurrent use.
func (f *Fence) Do(ctx context.Context, resource string, t Token, write func() error) error {
	if err := f.Admit(resource, t); err != nil {
		return err
	}
	if err := f.enter(ctx, resource, t); err != nil {
		return err
	}
	defer f.exit(resource)
	return write()
}

// enter waits until t's writes may run on resource and counts one in.
// The store has admitted t, but a higher token may have been admitted
// meanwhile and entered first; the gate refuses t then.
func (f *Fence) enter(ctx context.Context, resource string, t Token) error {
	f.mu.Lock()
	g := f.gates[resource]
	if g == nil {
		// Gates are kept for good: forgetting cur would let a write
		// admitted before a newer holder's start after it.
		g = &gate{}
		if f.gates == nil {
			f.gates = map[string]*gate{} // a zero Fence
		}
		f.gates[resource] = g
	}
	for {
		if t < g.cur || t < g.want {
			mark := max(g.cur, g.want)
			f.mu.Unlock()
			return staleErr(resource, t, mark)
		}
		if t == g.cur {
			g.n++
			f.mu.Unlock()
			return nil
		}
		if g.n == 0 { // t > cur: a new holder, and the old one's writes are done
			g.cur, g.want, g.n = t, 0, 1
			f.mu.Unlock()
			return nil
		}
		g.want = t // from now on, writes under cur may not start
		if g.idle == nil {
			g.idle = make(chan struct{})
		}
		idle := g.idle
		f.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			// want stays: the store's mark is t, so nothing lower may
			// start anyway, and the next write under t proceeds.
			return fmt.Errorf("coord: fenced write to %q waiting for older writes: %w", resource, ctx.Err())
		}
		f.mu.Lock()
	}
}

func (f *Fence) exit(resource string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gates[resource]
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// TokenHeader is the HTTP header that carries a fencing token, in the
// decimal form of Token.String.
const TokenHeader = "Coord-Fencing-Token"

// SetToken sets h's TokenHeader to t, or removes the header when t <= 0
// (no token).
func SetToken(h http.Header, t Token) {
	if t <= 0 {
		h.Del(TokenHeader)
		return
	}
	h.Set(TokenHeader, t.String())
}

// TokenFrom reads the token of r's TokenHeader. A missing header, more
// than one, or a malformed or non-positive token gives an error wrapping
// ErrInvalidToken.
func TokenFrom(r *http.Request) (Token, error) {
	vs := r.Header.Values(TokenHeader)
	switch len(vs) {
	case 0:
		return 0, fmt.Errorf("%w: no %s header", ErrInvalidToken, TokenHeader)
	case 1:
	default:
		return 0, fmt.Errorf("%w: %d %s headers", ErrInvalidToken, len(vs), TokenHeader)
	}
	return ParseToken(vs[0])
}

type tokenKey struct{}

// TokenFromContext returns the token that Fence.Middleware admitted for
// the request whose context is ctx, and whether there is one.
func TokenFromContext(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(Token)
	return t, ok
}

// Middleware fences the writes that next handles. For each request it
// reads the token (TokenFrom) and the resource the request writes
// (resource(r); a nil resource puts every request on one resource, ""),
// then runs next through Do: the mark is raised before next runs, and
// next runs only after the handlers of lower tokens for that resource
// have returned. next finds the token with TokenFromContext(r.Context()).
//
// It answers, without calling next: 400 Bad Request for a missing or
// malformed token; 409 Conflict for a stale one; 503 Service Unavailable
// when the request ends while waiting for older handlers; 500 when the
// store fails. Wrap only the handlers that write: a request without a
// token is refused.
func (f *Fence) Middleware(resource func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := TokenFrom(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		name := ""
		if resource != nil {
			name = resource(r)
		}
		r = r.WithContext(context.WithValue(r.Context(), tokenKey{}, t))
		err = f.Do(r.Context(), name, t, func() error {
			next.ServeHTTP(w, r)
			return nil
		})
		if err == nil { // next ran and answered
			return
		}
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, ErrStaleToken):
			code = http.StatusConflict
		case errors.Is(err, ErrInvalidToken):
			code = http.StatusBadRequest
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			code = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), code)
	})
}
