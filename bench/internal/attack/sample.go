package attack

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/bench/internal/proc"
)

// Door is a member's client-door counters (coord.ClientStatus), in a
// form that crosses the process boundary as JSON.
type Door struct {
	Admitted    int    `json:"admitted"`
	Pending     int    `json:"pending"`
	Refused     uint64 `json:"refused"`
	CutSlow     uint64 `json:"cut_slow"`
	CutIdle     uint64 `json:"cut_idle"`
	QueuedBytes int64  `json:"queued_bytes"`
	QueuedPeak  int64  `json:"queued_peak"`
}

// DoorOf converts a member's door status.
func DoorOf(st coord.ClientStatus) Door {
	return Door{Admitted: st.Admitted, Pending: st.Pending, Refused: st.Refused, CutSlow: st.CutSlow,
		CutIdle: st.CutIdle, QueuedBytes: st.QueuedBytes, QueuedPeak: st.QueuedPeak}
}

// Sample is one member's figures at one instant. Taken by Mark, RSS and
// Heap are the process's now (after a GC); taken by Peak, the highest
// since the last Mark.
type Sample struct {
	RSS  int64 `json:"rss"`
	Heap int64 `json:"heap"`
	// CPUSeconds is the process's CPU time so far.
	CPUSeconds float64 `json:"cpu_seconds"`
	// LastIndex is the member's last log index, Leader whether it leads.
	LastIndex uint64 `json:"last_index"`
	Leader    bool   `json:"leader"`
	Door      Door   `json:"door"`
	// Closed is set once the attack closed the member's node.
	Closed bool `json:"closed,omitempty"`
}

// sampleEvery is how often the sampler reads the process's RSS and heap:
// often enough to catch a spike that a GC or the scavenger ends within a
// few tens of milliseconds.
const sampleEvery = 5 * time.Millisecond

// heapMetric is the Go heap's bytes in objects, live or not yet swept:
// what an allocation spike raises at once (runtime.MemStats.HeapAlloc).
const heapMetric = "/memory/classes/heap/objects:bytes"

// Sampler follows this process's peak RSS and heap between a Mark and a
// Peak. One per process: the figures are the process's.
type Sampler struct {
	mu             sync.Mutex
	peakRSS, peakH int64
	// hwmReset is set when Mark could reset the kernel's VmHWM, which
	// then is an exact peak beside the sampled one.
	hwmReset bool
	stop     chan struct{}
	done     chan struct{}
}

// StartSampler starts sampling; Close stops it.
func StartSampler() *Sampler {
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{})}
	s.peakRSS, s.peakH = readRSS(), readHeap()
	go s.loop()
	return s
}

func (s *Sampler) loop() {
	defer close(s.done)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		r, h := readRSS(), readHeap()
		s.mu.Lock()
		s.peakRSS, s.peakH = max(s.peakRSS, r), max(s.peakH, h)
		s.mu.Unlock()
	}
}

// Close stops the sampler.
func (s *Sampler) Close() {
	close(s.stop)
	<-s.done
}

// Mark collects the garbage, returns what it can to the OS, forgets the
// peaks and returns the process's RSS and heap now: the baseline the
// next Peak is measured against. (Without the FreeOSMemory, memory an
// earlier attack freed would still be resident and hide the next one's.)
// Resetting VmHWM also resets the peak the process's rusage reports at
// its exit: in this scenario, a member process's peak RSS is that since
// the last attack's start.
func (s *Sampler) Mark() (rss, heap int64) {
	runtime.GC()
	debug.FreeOSMemory()
	// "5" resets the process's VmHWM to its RSS (Linux 4.0 on).
	reset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	rss, heap = readRSS(), readHeap()
	s.mu.Lock()
	s.peakRSS, s.peakH, s.hwmReset = rss, heap, reset
	s.mu.Unlock()
	return rss, heap
}

// Peak returns the highest RSS and heap since Mark.
func (s *Sampler) Peak() (rss, heap int64) {
	r, h := readRSS(), readHeap()
	s.mu.Lock()
	s.peakRSS, s.peakH = max(s.peakRSS, r), max(s.peakH, h)
	rss, heap = s.peakRSS, s.peakH
	reset := s.hwmReset
	s.mu.Unlock()
	if reset {
		if m, err := proc.ReadMemory(); err == nil {
			rss = max(rss, m.PeakRSS)
		}
	}
	return rss, heap
}

// readHeap reads heapMetric.
func readHeap() int64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// readRSS reads the process's resident set from /proc/self/statm (its
// second field, in pages): cheaper than /proc/self/status, read 200 times
// a second.
func readRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// nodeSample is n's figures with the sampler's memory ones.
func nodeSample(n *coord.Node, closed bool, rss, heap int64) Sample {
	st := n.Status()
	return Sample{RSS: rss, Heap: heap, CPUSeconds: proc.CPU().Seconds(), LastIndex: st.LastIndex,
		Leader: st.Role == coord.RoleLeader, Door: DoorOf(st.Clients), Closed: closed}
}
