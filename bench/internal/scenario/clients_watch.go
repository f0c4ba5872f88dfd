package scenario

import (
	"context"
	"fmt"

	"github.com/coordcell/coord/bench/internal/cell"
)

// ClientsWatch connects cfg.Clients clients, client i to member i%3, and
// starts cfg.ClientWatchers watchers of one prefix on each (watcher w on
// client w%Clients), then makes cfg.WatchPuts puts one at a time through
// the members in turn, as the watch scenario does. Besides the time until
// every watcher received a put, it reports what the members sent the
// clients per change: a client merges its watchers of one prefix into
// one upstream watch, so one frame of events per client, whatever the
// watchers behind it.
func ClientsWatch(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		clients, err := connectClients(ctx, c, cfg.Clients)
		if err != nil {
			return nil, err
		}
		defer closeClients(clients)
		var before, after cell.ClientTraffic
		f := fanOut{
			watchers: cfg.Clients * cfg.ClientWatchers, puts: cfg.WatchPuts,
			watch: func(ctx context.Context, w int, fn func(key string)) error {
				return clients[w%len(clients)].Watch(ctx, watchPrefix, fn)
			},
			put: func(ctx context.Context, i int, key string) error {
				return c.Put(ctx, i%cell.Members, key, []byte("x"))
			},
			measured: func(start bool) {
				var sum cell.ClientTraffic
				for _, t := range clientTraffic(clients) {
					sum = sum.Add(t)
				}
				if start {
					before = sum
				} else {
					after = sum
				}
			},
		}
		alls, each, err := f.run(ctx, env)
		if err != nil {
			return nil, err
		}
		d, puts := after.Sub(before), float64(cfg.WatchPuts)
		env.log("clients-watch: %d event frames (%d bytes) to %d clients for %d puts", d.WatchEvents, d.WatchEventBytes, cfg.Clients, cfg.WatchPuts)
		label := fmt.Sprintf("%d clients x %d watchers, %d puts", cfg.Clients, cfg.ClientWatchers, cfg.WatchPuts)
		out := fanOutMetrics("clients-watch", label, alls, each)
		return append(out,
			Metric{Name: "clients-watch.event_frames", Label: label + ": event frames the members sent per change (all clients)",
				Unit: "frames", Value: float64(d.WatchEvents) / puts},
			Metric{Name: "clients-watch.event_frames_per_client", Label: label + ": event frames per change per client",
				Unit: "frames", Value: float64(d.WatchEvents) / puts / float64(cfg.Clients)},
			Metric{Name: "clients-watch.event_bytes", Label: label + ": bytes of event frames per change (all clients)",
				Unit: "B", Value: float64(d.WatchEventBytes) / puts},
		), nil
	})
}
