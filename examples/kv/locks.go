package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/coordcell/coord"
)

// LockState is what POST /sessions/{id}/locks/{name} answers: the hold's
// fencing token, which the caller hands to the resource it writes.
type LockState struct {
	Name  string `json:"name"`
	Token uint64 `json:"token"`
}

// lock takes the lock name for the session id (a session opened by POST
// /sessions on this member), waiting up to ?wait= (default 5s) for it;
// ?delay= asks for a lock-delay (coord.WithLockDelay) should the session
// expire while it holds the lock.
func (b *sessionBook) lock(w http.ResponseWriter, r *http.Request) {
	h, ok := b.held(w, r)
	if !ok {
		return
	}
	wait := 5 * time.Second
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		wait = d
	}
	var opts []coord.MutexOption
	if v := r.URL.Query().Get("delay"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		opts = append(opts, coord.WithLockDelay(d))
	}
	name := r.PathValue("name")
	m := coord.NewMutex(h.s, name, opts...)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	token, err := m.Lock(ctx)
	if err != nil {
		http.Error(w, err.Error(), httpStatus(err))
		return
	}
	b.mu.Lock()
	h.locks[name] = m
	b.mu.Unlock()
	json.NewEncoder(w).Encode(LockState{Name: name, Token: uint64(token)})
}

// unlock releases the lock name held by the session id.
func (b *sessionBook) unlock(w http.ResponseWriter, r *http.Request) {
	h, ok := b.held(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	b.mu.Lock()
	m := h.locks[name]
	delete(h.locks, name)
	b.mu.Unlock()
	if m == nil {
		http.Error(w, "this session holds no lock "+strconv.Quote(name)+" here", http.StatusNotFound)
		return
	}
	if err := m.Unlock(r.Context()); err != nil && !errors.Is(err, coord.ErrNotHeld) {
		http.Error(w, err.Error(), httpStatus(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// held finds the session named by the path's {id}, answering 400 or 404
// itself when there is none.
func (b *sessionBook) held(w http.ResponseWriter, r *http.Request) (*heldSession, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	b.mu.Lock()
	h, ok := b.m[coord.SessionID(id)]
	b.mu.Unlock()
	if !ok {
		http.Error(w, "no such session here", http.StatusNotFound)
		return nil, false
	}
	return h, true
}
