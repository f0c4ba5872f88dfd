package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coordcell/coord"
)

// sessionBook holds sessions opened over HTTP and what became of them,
// so a test driving member processes from outside can tell whether a
// session ended and whether its holder was warned (jeopardy) first.
type sessionBook struct {
	node *coord.Node
	mu   sync.Mutex
	m    map[coord.SessionID]*heldSession
}

type heldSession struct {
	s        *coord.Session
	jeopardy bool // jeopardy seen at least once
	ended    bool
	// warned: jeopardy was seen before the session ended.
	warned bool
	// locks are the locks taken over HTTP with this session, by name.
	locks map[string]*coord.Mutex
}

// SessionState is what GET /sessions/{id} reports.
type SessionState struct {
	ID       int64  `json:"id"`
	Ended    bool   `json:"ended"`
	Err      string `json:"err,omitempty"`
	Jeopardy bool   `json:"jeopardy"`
	Warned   bool   `json:"warned"`
}

func newSessionBook(n *coord.Node) *sessionBook {
	return &sessionBook{node: n, m: make(map[coord.SessionID]*heldSession)}
}

// create opens a session (?ttl=, default the member's minimum) and
// answers its ID.
func (b *sessionBook) create(w http.ResponseWriter, r *http.Request) {
	ttl := b.node.MinSessionTTL()
	if v := r.URL.Query().Get("ttl"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ttl = d
	}
	s, err := b.node.NewSession(r.Context(), coord.WithTTL(ttl))
	if err != nil {
		http.Error(w, err.Error(), httpStatus(err))
		return
	}
	h := &heldSession{s: s, locks: make(map[string]*coord.Mutex)}
	b.mu.Lock()
	b.m[s.ID()] = h
	b.mu.Unlock()
	go b.follow(h)
	json.NewEncoder(w).Encode(SessionState{ID: int64(s.ID())})
}

// follow records jeopardy and the end of h's session.
func (b *sessionBook) follow(h *heldSession) {
	for {
		select {
		case <-h.s.Jeopardy():
			b.mu.Lock()
			h.jeopardy = true
			b.mu.Unlock()
			select {
			case <-h.s.Healthy():
				continue
			case <-h.s.Done():
			}
		case <-h.s.Done():
		}
		b.mu.Lock()
		// Jeopardy is closed no later than Done: look once more.
		select {
		case <-h.s.Jeopardy():
			h.jeopardy = true
		default:
		}
		h.ended, h.warned = true, h.jeopardy
		b.mu.Unlock()
		return
	}
}

func (b *sessionBook) get(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	h, ok := b.m[coord.SessionID(id)]
	var st SessionState
	if ok {
		st = SessionState{ID: id, Ended: h.ended, Jeopardy: h.jeopardy, Warned: h.warned}
	}
	b.mu.Unlock()
	if !ok {
		http.Error(w, "no such session here", http.StatusNotFound)
		return
	}
	if err := h.s.Err(); err != nil {
		st.Err = err.Error()
	}
	json.NewEncoder(w).Encode(st)
}
