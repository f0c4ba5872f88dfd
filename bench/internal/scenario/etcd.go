package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"go.uber.org/zap"
)

// The etcd-* scenarios drive both sides through etcd's own client,
// clientv3 over loopback gRPC: coord behind its etcdapi front on each
// member (package frontcell), and etcd. Set beside put, get and lock (and
// client-put, whose coord side uses coord's own protocol), they show what
// the gRPC front costs, with etcd serving the same calls over the same
// wire. Preloads and fsync counts stay in-process, as in put and get.

// etcdDialTimeout bounds the dial of one clientv3 client.
const etcdDialTimeout = 10 * time.Second

// etcdClients dials cell.Members clientv3 clients to c's etcd endpoints:
// each with all of them, which clientv3 spreads its calls over
// (round-robin per call, its default), or with pinned client i with
// member i's alone (as client-put pins coord's and etcd's clients). On
// error the ones dialled are closed.
func etcdClients(c cell.Cell, pinned bool) ([]*clientv3.Client, error) {
	es, ok := c.(cell.EtcdServer)
	if !ok {
		return nil, fmt.Errorf("the %s cell serves no etcd API", c.Side())
	}
	eps := es.EtcdEndpoints()
	if len(eps) != cell.Members {
		return nil, fmt.Errorf("the %s cell has %d etcd endpoints, want %d", c.Side(), len(eps), cell.Members)
	}
	clients := make([]*clientv3.Client, cell.Members)
	for i := range clients {
		cfg := clientv3.Config{Endpoints: eps, DialTimeout: etcdDialTimeout, Logger: zap.NewNop()}
		if pinned {
			cfg.Endpoints = eps[i : i+1]
		}
		cl, err := clientv3.New(cfg)
		if err != nil {
			closeEtcdClients(clients)
			return nil, fmt.Errorf("clientv3 %d to the %s cell: %w", i, c.Side(), err)
		}
		clients[i] = cl
	}
	return clients, nil
}

func closeEtcdClients(clients []*clientv3.Client) {
	for _, cl := range clients {
		if cl != nil {
			cl.Close()
		}
	}
}

// etcdVia names, for labels, what the etcd-* scenarios call the members
// through, and whether each client has one member.
func etcdVia(pinned bool, what string) string {
	if pinned {
		return " via " + what + ", one member per client"
	}
	return " via " + what
}

// EtcdPut is the put scenario through clientv3 (three clients, caller w
// on client w%3): cfg.ValueSize-byte values at each concurrency of
// cfg.PutClients, with the fsyncs per put.
func EtcdPut(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		clients, err := etcdClients(c, cfg.EtcdPinned)
		if err != nil {
			return nil, err
		}
		defer closeEtcdClients(clients)
		val := string(value(cfg.ValueSize))
		var out []Metric
		for _, callers := range cfg.PutClients {
			fs := startFsyncs(c)
			res, err := runLoad(ctx, callers, cfg.Warmup, cfg.Duration, func(ctx context.Context, w, seq int) error {
				key := "bench/etcd-put/" + strconv.Itoa(w) + "/" + strconv.Itoa(seq%putKeysPerWorker)
				_, err := clients[w%cell.Members].Put(ctx, key, val)
				return err
			})
			if err != nil {
				return out, fmt.Errorf("put via clientv3, %d clients: %w", callers, err)
			}
			env.log("put via clientv3, %d clients: %.0f ops/s", callers, res.rate())
			name := fmt.Sprintf("etcd-put.c%d", callers)
			label := fmt.Sprintf("put %dB%s, %d clients", cfg.ValueSize, etcdVia(cfg.EtcdPinned, "clientv3"), callers)
			out = append(out, res.metrics(name, label, "ops/s")...)
			out = append(out, fs.metrics(c, res.done, name, label)...)
		}
		return out, nil
	})
}

// EtcdGet is the get scenario through clientv3: cfg.GetKeys keys
// preloaded in-process, then linearizable and serializable reads by
// cfg.GetClients callers, caller w on client w%3.
func EtcdGet(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		if err := preload(ctx, c, cfg.GetKeys, cfg.ValueSize); err != nil {
			return nil, err
		}
		clients, err := etcdClients(c, cfg.EtcdPinned)
		if err != nil {
			return nil, err
		}
		defer closeEtcdClients(clients)
		var out []Metric
		for _, serializable := range []bool{false, true} {
			kind, opts := "linearizable", []clientv3.OpOption(nil)
			if serializable {
				kind, opts = "serializable", []clientv3.OpOption{clientv3.WithSerializable()}
			}
			res, err := runLoad(ctx, cfg.GetClients, cfg.Warmup, cfg.Duration, func(ctx context.Context, w, _ int) error {
				_, err := clients[w%cell.Members].Get(ctx, getKey(rand.IntN(cfg.GetKeys)), opts...)
				return err
			})
			if err != nil {
				return out, fmt.Errorf("%s get via clientv3: %w", kind, err)
			}
			env.log("%s get via clientv3, %d clients: %.0f ops/s", kind, cfg.GetClients, res.rate())
			out = append(out, res.metrics("etcd-get."+kind,
				fmt.Sprintf("get %s%s, %d clients", kind, etcdVia(cfg.EtcdPinned, "clientv3"), cfg.GetClients), "ops/s")...)
		}
		return out, nil
	})
}

// EtcdLock is the lock scenario through etcd's v3lock service, which both
// sides serve: cfg.LockHolders holders, holder h with a lease granted
// and kept alive by client h%3 (concurrency.NewSession), each cycle a
// Lock on the lease and an Unlock of the key it returned, contended then
// uncontended. Not clientv3's concurrency.Mutex: on coord that writes
// plain keys, not coord's fair lock, while v3lock is coord's Mutex behind
// the front (and etcd's concurrency.Mutex inside etcd).
func EtcdLock(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) (out []Metric, err error) {
		clients, err := etcdClients(c, cfg.EtcdPinned)
		if err != nil {
			return nil, err
		}
		defer closeEtcdClients(clients)
		sessions := make([]*concurrency.Session, cfg.LockHolders)
		defer func() {
			for _, s := range sessions {
				if s != nil {
					err = errors.Join(err, s.Close())
				}
			}
		}()
		locks := make([]v3lockpb.LockClient, cfg.LockHolders)
		for h := range sessions {
			cl := clients[h%cell.Members]
			sessions[h], err = concurrency.NewSession(cl, concurrency.WithTTL(int(lockSessionTTL/time.Second)))
			if err != nil {
				return nil, fmt.Errorf("lock holder %d's lease: %w", h, err)
			}
			locks[h] = v3lockpb.NewLockClient(cl.ActiveConnection())
		}
		return lockLoad(ctx, env, cfg, "etcd-lock", etcdVia(cfg.EtcdPinned, "v3lock (clientv3)"),
			func(h int, lock string) cell.Mutex {
				// Under "/locks/" as etcdcell's mutexes: v3lock's name is
				// etcd's key prefix, and the lock waits for every older
				// key under it ("bench/ready" under "bench/" forever).
				return &v3lockMutex{lc: locks[h], lease: int64(sessions[h].Lease()), name: []byte("/locks/" + lock)}
			})
	})
}

// v3lockMutex is one cycle's handle on a lock of etcd's v3lock service.
type v3lockMutex struct {
	lc    v3lockpb.LockClient
	lease int64
	name  []byte
	key   []byte // what Lock returned: Unlock's argument
}

func (m *v3lockMutex) Lock(ctx context.Context) error {
	r, err := m.lc.Lock(ctx, &v3lockpb.LockRequest{Name: m.name, Lease: m.lease})
	if err != nil {
		return err
	}
	m.key = r.Key
	return nil
}

func (m *v3lockMutex) Unlock(ctx context.Context) error {
	_, err := m.lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: m.key})
	return err
}
