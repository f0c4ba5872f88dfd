package coord

import (
	"context"
	"errors"
	"fmt"

	"github.com/coordcell/coord/internal/lockq"
	"github.com/coordcell/coord/internal/spi"
)

// Election is a session's candidacy in a leader election. The leader is
// the candidate that has waited longest (the lowest create revision among
// the group's candidates, exactly as for a Mutex); its Token is its
// epoch, strictly greater for every new leader of the group, so fence the
// leader's writes with it. Candidates queue fairly and each watches only
// the one ahead of it.
//
// An Election is one candidacy at a time: Campaign while this Election
// campaigns or leads blocks until Resign. Its methods are safe for
// concurrent use by multiple goroutines. Leadership ends with Resign, or
// is lost when the session ends or the key is deleted (Done says when);
// after a loss call Resign (it returns ErrNotLeader) before campaigning
// again with the same Election.
type Election struct {
	q     *queue
	group string
}

// Leader is the state of an election at one revision.
type Leader struct {
	// Value is the leader's value, from Campaign or the latest Proclaim.
	Value string
	// Token is the leader's fencing token: its candidacy's create
	// revision, strictly greater for every new leader.
	Token Token
	// Session is the leader's session.
	Session SessionID
	// Key is the leader's candidacy key, under elections/{group}/.
	Key string
	// Vacant is true when there is no leader (no candidates); the other
	// fields are then zero.
	Vacant bool
}

// NewElection returns session s's candidacy in group, not yet
// campaigning. The group's candidates are the keys under
// elections/{group}/; an empty group is refused by Campaign.
func NewElection(s *Session, group string) *Election {
	q := newQueue(s, lockq.ElectionPrefix(group), false)
	q.err = checkGroup(group)
	return &Election{q: q, group: group}
}

// Campaign joins the candidates with value and waits until this
// candidacy leads, then returns its token. Context, session and
// unreachable-cell behaviour are as for Mutex.Lock: in particular a
// candidate whose session ends returns at once, and one whose ctx ends
// withdraws.
func (e *Election) Campaign(ctx context.Context, value string) (Token, error) {
	return e.q.acquire(ctx, lockq.KindLeader, []byte(value), false)
}

// TryCampaign leads with value if the group has no other candidate, and
// reports whether it did; if not, it withdraws again and returns false
// with a nil error. It also returns false while this Election already
// campaigns or leads. This is elect(group) -> {isLeader, token}.
func (e *Election) TryCampaign(ctx context.Context, value string) (bool, Token, error) {
	t, err := e.q.acquire(ctx, lockq.KindLeader, []byte(value), true)
	if errors.Is(err, ErrLocked) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	return true, t, nil
}

// Resign gives up the leadership with a delete guarded by the token, so
// a delayed or retried Resign never removes a later candidacy. Like
// Mutex.Unlock it retries while the cell is unreachable until ctx ends,
// always frees this Election, and on an error other than ErrNotLeader
// goes on in the background. It returns an error wrapping ErrNotLeader if
// this Election did not lead, or had already lost the leadership.
func (e *Election) Resign(ctx context.Context) error {
	return e.q.release(ctx, lockq.KindLeader, ErrNotLeader)
}

// Proclaim changes the leader's value without giving up the leadership.
// The write is guarded by the token: it happens only while this
// candidacy still leads, otherwise Proclaim returns ErrNotLeader.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	h := e.q.current()
	if h == nil {
		return fmt.Errorf("%w: %q", ErrNotLeader, e.group)
	}
	if err := e.q.s.Err(); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrNotLeader, e.group, err)
	}
	res, err := newTxn(ctx, e.q.s.b).
		If(CreateRev(h.key).Eq(int64(h.token))).
		Then(OpPut(h.key, []byte(value), Ephemeral(e.q.s))).
		Commit()
	if err != nil {
		return err
	}
	if !res.Succeeded {
		return fmt.Errorf("%w: %q: the leadership with token %d has ended", ErrNotLeader, e.group, h.token)
	}
	return nil
}

// Token returns the token of this Election's leadership, from Campaign's
// return until Resign; 0 when it does not lead.
func (e *Election) Token() Token { return e.q.token() }

// Key returns this Election's candidacy key while it leads (under
// elections/{group}/, owned by the session), from Campaign's return until
// Resign; "" when it does not lead. Leader.Key of the group's leader is
// this key exactly while this Election leads.
func (e *Election) Key() string { return e.q.key() }

// Rev returns the create revision of this Election's candidacy key while
// it leads, 0 when it does not: the same number as Token, as a revision,
// for code that reads or watches the cell from where the leadership
// began (FromRev(e.Rev())).
func (e *Election) Rev() int64 { return int64(e.q.token()) }

// Done returns a channel that is closed when this Election's leadership
// ends for any reason (Resign, the session's end, the key deleted); a
// closed channel when it does not lead. It is only ever closed.
func (e *Election) Done() <-chan struct{} { return e.q.done() }

// Leader returns the group's current leader, read linearizably. When the
// group has no leader it returns a Leader with Vacant set and an error
// wrapping ErrNoLeader. It is ElectionLeader on the session's cell.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	return groupLeader(ctx, e.q.s.b, e.group)
}

// ElectionLeader returns the current leader of group, read linearizably,
// as Election.Leader does, without a session: a process that only needs
// to know the leader costs the cell no session and no log entry. When
// the group has no leader it returns a Leader with Vacant set and an
// error wrapping ErrNoLeader; an empty group gives ErrInvalidKey.
func ElectionLeader(ctx context.Context, c Cell, group string) (Leader, error) {
	return groupLeader(ctx, c.cell(), group)
}

func groupLeader(ctx context.Context, b *cellOps, group string) (Leader, error) {
	if err := checkGroup(group); err != nil {
		return Leader{}, err
	}
	prefix := lockq.ElectionPrefix(group)
	kvs, _, err := listPrefix(ctx, b, prefix, nil)
	if err != nil {
		return Leader{}, err
	}
	l := leaderOf(parseQueue(prefix, false, kvs))
	if l.Vacant {
		return l, fmt.Errorf("%w: %q", ErrNoLeader, group)
	}
	return l, nil
}

func checkGroup(group string) error {
	if group == "" {
		return fmt.Errorf("%w: empty election group", ErrInvalidKey)
	}
	return nil
}

func leaderOf(q []lockq.Waiter[KV]) Leader {
	if len(q) == 0 {
		return Leader{Vacant: true}
	}
	kv := q[0].Item
	return Leader{Value: string(kv.Value), Token: Token(kv.CreateRev), Session: kv.Session, Key: kv.Key}
}

// Observe streams the group's leadership: first the current state (read
// linearizably), then every change in revision order, including the
// group becoming vacant (Vacant set) and the leader's value changing by
// Proclaim. A state is never sent twice in a row, and every state sent is
// one the group really had at some revision, as this member applied it.
//
// The channel is unbuffered and lossless: Observe waits for the receiver,
// and the watch behind it holds the changes meanwhile. Only when the
// changes not yet taken have left the member's retained history
// (Config.HistoryRevisions; a member that caught up by a snapshot has
// lost them too) does Observe miss states: it then reads the group again
// and goes on from the state it finds, which it reports unless it equals
// the last one sent. Observe closes the channel when ctx ends or the
// member closes; end ctx when done receiving, so its goroutine ends.
//
// Observing needs no session: this is ObserveElection on the session's
// cell, and the session's end does not end it.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	return observeGroup(ctx, e.q.s.b, e.group)
}

// ObserveElection streams the leadership of group exactly as
// Election.Observe does (see there for what is sent and when the
// channel closes), without a session: a watch costs the cell no log
// entry, so a process that only follows the leader needs no Session. An
// empty group gives a channel closed at once.
func ObserveElection(ctx context.Context, c Cell, group string) <-chan Leader {
	return observeGroup(ctx, c.cell(), group)
}

func observeGroup(ctx context.Context, b *cellOps, group string) <-chan Leader {
	ch := make(chan Leader)
	go observe(ctx, b, group, ch)
	return ch
}

// observe is ListWatch of the group, with the state at the end of each
// revision sent on ch.
func observe(ctx context.Context, b *cellOps, group string, ch chan<- Leader) {
	defer close(ch)
	if checkGroup(group) != nil {
		return
	}
	prefix := lockq.ElectionPrefix(group)
	var (
		last  Leader
		sent  bool
		lists int
	)
	state := map[string]KV{}
	send := func() error {
		l := leaderFrom(prefix, state)
		if sent && l == last {
			return nil
		}
		select {
		case ch <- l:
			last, sent = l, true
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	onList := func(kvs []KV, _ int64) error {
		if lists++; lists > 1 {
			// The watch could not go on (it fell behind the retained
			// history, or the receiver fell too far behind).
			b.queueProbes().Note(prefix, spi.ProbeRelist)
		}
		clear(state)
		for _, kv := range kvs {
			state[kv.Key] = kv
		}
		return send()
	}
	// One change, such as a session's end, can touch several candidacies,
	// and the state half-way through it never existed: send only at the
	// end of each revision.
	onEvent := func(ev Event) error {
		switch ev.Type {
		case EventPut:
			state[ev.KV.Key] = ev.KV
		case EventDelete:
			delete(state, ev.KV.Key)
		default:
			return nil
		}
		if !ev.EndOfRev {
			return nil
		}
		return send()
	}
	// No lag limit: the receiver sets the pace, and the member keeps what
	// it has not taken yet (within the retained history).
	_ = listWatch(ctx, b, prefix, onList, onEvent, WithMaxLag(0))
}

func leaderFrom(prefix string, state map[string]KV) Leader {
	kvs := make([]KV, 0, len(state))
	for _, kv := range state {
		kvs = append(kvs, kv)
	}
	return leaderOf(parseQueue(prefix, false, kvs))
}
