package etcdapi

import (
	"context"
	"errors"
	"sync"

	"github.com/coordcell/coord"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// watchServer is etcd's Watch service: one bidirectional stream carries
// many watches, each a coord watch of exactly its key or range.
type watchServer struct {
	pb.UnimplementedWatchServer
	s *server
}

// watchStream is one Watch call's state.
type watchStream struct {
	s      *server
	stream grpc.BidiStreamingServer[pb.WatchRequest, pb.WatchResponse]
	ctx    context.Context

	sendMu sync.Mutex // gRPC streams take one Send at a time

	mu      sync.Mutex
	watches map[int64]*oneWatch
	nextID  int64
	wg      sync.WaitGroup
}

// oneWatch is one watch of a stream.
type oneWatch struct {
	id     int64
	w      *coord.Watcher
	cancel context.CancelFunc
}

// Watch serves one stream until the client ends it.
func (ws *watchServer) Watch(stream grpc.BidiStreamingServer[pb.WatchRequest, pb.WatchResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	st := &watchStream{s: ws.s, stream: stream, ctx: ctx, watches: make(map[int64]*oneWatch)}
	defer func() {
		cancel()
		st.wg.Wait()
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		switch r := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			if err := st.create(r.CreateRequest); err != nil {
				return err
			}
		case *pb.WatchRequest_CancelRequest:
			if err := st.cancel(r.CancelRequest.WatchId); err != nil {
				return err
			}
		case *pb.WatchRequest_ProgressRequest:
			if err := st.progress(); err != nil {
				return err
			}
		}
	}
}

func (st *watchStream) send(r *pb.WatchResponse) error {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	return st.stream.Send(r)
}

// refuse answers a create it will not serve: created and canceled at
// once, with the reason (what clientv3 reports as the watch's error).
func (st *watchStream) refuse(id int64, reason string) error {
	return st.send(&pb.WatchResponse{Header: st.s.header(-1), WatchId: id, Created: true, Canceled: true,
		CancelReason: reason})
}

func (st *watchStream) create(c *pb.WatchCreateRequest) error {
	if len(c.Key) == 0 {
		return st.refuse(-1, "etcdserver: key is not provided")
	}
	st.mu.Lock()
	id := c.WatchId
	switch {
	case len(st.watches) >= st.s.o.maxWatches:
		st.mu.Unlock()
		return st.refuse(-1, "etcdapi: too many watches on this stream")
	case st.s.watches.Load() >= st.s.o.maxAllWatches:
		st.mu.Unlock()
		return st.refuse(-1, "etcdapi: too many watches on this server")
	case id == 0:
		// Auto IDs count from 0, as etcd's, past any in use.
		for st.watches[st.nextID] != nil {
			st.nextID++
		}
		id = st.nextID
		st.nextID++
	case st.watches[id] != nil:
		st.mu.Unlock()
		return st.refuse(id, "mvcc: duplicate watch ID provided on the WatchStream")
	}
	var puts, dels = true, true
	for _, f := range c.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			puts = false
		case pb.WatchCreateRequest_NODELETE:
			dels = false
		}
	}
	kr := rangeOf(c.Key, c.RangeEnd)
	var opts []coord.WatchOption
	if c.PrevKv {
		opts = append(opts, coord.WithPrevKV())
	}
	if c.ProgressNotify {
		opts = append(opts, coord.WithProgressNotify(st.s.o.progressInterval))
	}
	switch {
	case !puts && dels:
		opts = append(opts, coord.DeletesOnly())
	case puts && !dels:
		opts = append(opts, coord.PutsOnly())
	}
	from := int64(-1)
	if c.StartRevision > 0 {
		// etcd's start is inclusive and numbered one up; coord's FromRev
		// exclusive.
		from = max(coordRev(c.StartRevision)-1, 0)
	}
	ctx, cancel := context.WithCancel(st.ctx)
	w := watchRange(ctx, st.s.cell, kr, from, opts...)
	st.s.watches.Add(1)
	ow := &oneWatch{id: id, w: w}
	var once sync.Once
	ow.cancel = func() {
		cancel()
		once.Do(func() { st.s.watches.Add(-1) })
	}
	st.watches[id] = ow
	st.mu.Unlock()
	// Answer the create before reading the next request, as etcd does: a
	// client that sends several creates matches the answers in order.
	select {
	case <-w.Ready():
	case <-ctx.Done():
		ow.cancel()
		return nil
	}
	var ce *coord.CompactedError
	if err := w.Err(); errors.As(err, &ce) {
		st.forget(id)
		ow.cancel()
		if err := st.send(&pb.WatchResponse{Header: st.s.header(-1), WatchId: id, Created: true}); err != nil {
			return err
		}
		return st.send(&pb.WatchResponse{Header: st.s.header(-1), WatchId: id, Canceled: true,
			CompactRevision: etcdRev(ce.Oldest), CancelReason: "etcdserver: mvcc: required revision has been compacted"})
	}
	rev, _ := st.s.currentRev(ctx)
	if err := st.send(&pb.WatchResponse{Header: st.s.header(max(rev, w.LastRev())), WatchId: id, Created: true}); err != nil {
		ow.cancel()
		return err
	}
	st.wg.Add(1)
	go st.serve(ctx, ow, puts || dels, c.Fragment)
	return nil
}

// serve relays one watch's events until it ends.
func (st *watchStream) serve(ctx context.Context, ow *oneWatch, any, fragment bool) {
	defer st.wg.Done()
	defer ow.cancel()
	w := ow.w
	var batch []*mvccpb.Event
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				if ctx.Err() == nil {
					reason := "etcdapi: watch ended"
					if err := w.Err(); err != nil {
						reason = "etcdapi: " + err.Error()
					}
					_ = st.send(&pb.WatchResponse{Header: st.s.header(-1), WatchId: ow.id, Canceled: true, CancelReason: reason})
					st.forget(ow.id)
				}
				return
			}
			if ev.Type == coord.EventProgress {
				if len(batch) == 0 {
					if err := st.send(&pb.WatchResponse{Header: st.s.header(ev.Rev), WatchId: ow.id}); err != nil {
						return
					}
				}
				continue
			}
			if any {
				batch = append(batch, toEvent(ev))
			}
			if !ev.EndOfRev || len(w.Events()) > 0 && len(batch) < 1000 {
				continue
			}
			if len(batch) > 0 {
				if err := st.sendEvents(ow.id, ev.Rev, batch, fragment); err != nil {
					return
				}
				batch = nil
			}
		case <-ctx.Done():
			return
		}
	}
}

// sendEvents sends one batch, split into fragments past the message
// bound when the client asked for fragments.
func (st *watchStream) sendEvents(id, rev int64, evs []*mvccpb.Event, fragment bool) error {
	resp := &pb.WatchResponse{Header: st.s.header(rev), WatchId: id, Events: evs}
	if !fragment || proto.Size(resp) <= st.s.o.maxRecv {
		return st.send(resp)
	}
	for len(evs) > 0 {
		n, size := 0, 0
		for n < len(evs) && (n == 0 || size+proto.Size(evs[n]) <= st.s.o.maxRecv/2) {
			size += proto.Size(evs[n])
			n++
		}
		part := &pb.WatchResponse{Header: st.s.header(rev), WatchId: id, Events: evs[:n], Fragment: n < len(evs)}
		if err := st.send(part); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

func toEvent(ev coord.Event) *mvccpb.Event {
	if ev.Type == coord.EventDelete {
		out := &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(ev.KV.Key), ModRevision: etcdRev(ev.Rev)}}
		if ev.PrevKV != nil {
			out.PrevKv = toKV(*ev.PrevKV, false)
		}
		return out
	}
	out := &mvccpb.Event{Type: mvccpb.PUT, Kv: toKV(ev.KV, false)}
	if ev.PrevKV != nil {
		out.PrevKv = toKV(*ev.PrevKV, false)
	}
	return out
}

func (st *watchStream) forget(id int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.watches, id)
}

func (st *watchStream) cancel(id int64) error {
	st.mu.Lock()
	ow := st.watches[id]
	delete(st.watches, id)
	st.mu.Unlock()
	if ow == nil {
		return nil
	}
	ow.cancel()
	return st.send(&pb.WatchResponse{Header: st.s.header(-1), WatchId: id, Canceled: true})
}

// progress asks every watch of the stream for its progress; with none,
// answers at once for the stream (WatchId -1), as etcd does.
func (st *watchStream) progress() error {
	st.mu.Lock()
	ws := make([]*oneWatch, 0, len(st.watches))
	for _, ow := range st.watches {
		ws = append(ws, ow)
	}
	st.mu.Unlock()
	if len(ws) == 0 {
		rev, err := st.s.currentRev(st.ctx)
		if err != nil {
			return toGRPC(err)
		}
		return st.send(&pb.WatchResponse{Header: st.s.header(rev), WatchId: -1})
	}
	for _, ow := range ws {
		ow.w.RequestProgress()
	}
	return nil
}
