package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/coordcell/coord/bench/internal/attack"
	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/coordcell"
	"github.com/coordcell/coord/bench/internal/etcdcell"
	"github.com/coordcell/coord/bench/internal/member"
	"github.com/coordcell/coord/bench/internal/scale"
	"github.com/coordcell/coord/bench/internal/scenario"
	"github.com/coordcell/coord/bench/internal/soak"
)

// memberFlag is the hidden flag with which the program re-executes
// itself as one member process of a multi-process cell (-soak, -shape
// procs): it then speaks package member's protocol on stdin and stdout.
const memberFlag = "member"

// runMember is a member process's main.
func runMember(ctx context.Context, stdout, stderr io.Writer) int {
	openers := map[string]cell.MemberOpener{"coord": coordcell.OpenMember, "etcd": etcdcell.OpenMember}
	err := member.Serve(ctx, os.Stdin, stdout, openers, func(m cell.Member) member.Service {
		return &memberServices{m: m, soak: soak.NewService(m), attack: attack.NewService(m), scale: scale.NewService(m)}
	})
	if err != nil {
		io.WriteString(stderr, "bench member: "+err.Error()+"\n")
		return 1
	}
	return 0
}

// The member processes' operations of the keep-alive point
// (sessions@procs).
const (
	opKeepAliveWindow = "ka-window" // a window of KeepAliveHolder.Window: a time.Duration
	opKeepAliveCreate = "ka-create" // a scenario.KeepAliveShare
)

// The member processes' operations of the in-flight scenario.
const (
	opInflight        = "inflight"         // a survivor's scenario.InflightShare
	opLeads           = "leads"            // whether the member leads: a bool
	opCloseGracefully = "close-gracefully" // close the member gracefully, keep the process
)

// memberServices routes a member process's requests by their prefix.
type memberServices struct {
	m         cell.Member
	soak      *soak.Service
	attack    *attack.Service
	keepAlive scenario.KeepAliveHolder
	scale     *scale.Service
}

// Handle passes the soak operations to the soak service and the
// client-attacks ones to the attack service, and runs the
// multi-process shape's load points and in-flight rounds.
func (s *memberServices) Handle(ctx context.Context, op string, body json.RawMessage) (any, error) {
	if strings.HasPrefix(op, "soak-") {
		return s.soak.Handle(ctx, op, body)
	}
	if strings.HasPrefix(op, "attack-") {
		return s.attack.Handle(ctx, op, body)
	}
	if strings.HasPrefix(op, scale.OpPrefix) {
		return s.scale.Handle(ctx, op, body)
	}
	switch op {
	case opKeepAliveWindow:
		var d time.Duration
		if err := json.Unmarshal(body, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		return s.keepAlive.Window(ctx, d)
	case opKeepAliveCreate:
		var sh scenario.KeepAliveShare
		if err := json.Unmarshal(body, &sh); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		return s.keepAlive.Create(ctx, s.m, sh)
	case opLoad:
		var l scenario.MemberLoad
		if err := json.Unmarshal(body, &l); err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		if l.Profile != "" {
			stop, err := startRecording(filepath.Dir(l.Profile), filepath.Base(l.Profile), pprof.StartCPUProfile, pprof.StopCPUProfile)
			if err != nil {
				return nil, fmt.Errorf("load: %w", err)
			}
			defer stop()
		}
		return scenario.RunMemberLoad(ctx, s.m, l)
	case opInflight:
		var sh scenario.InflightShare
		if err := json.Unmarshal(body, &sh); err != nil {
			return nil, fmt.Errorf("inflight: %w", err)
		}
		return scenario.RunInflightShare(ctx, s.m, sh)
	case opLeads:
		l, ok := s.m.(cell.Leads)
		if !ok {
			return nil, errors.New("bench member: this side cannot say whether it leads")
		}
		return l.Leads(), nil
	case opCloseGracefully:
		// The member closes as its side's ordinary shutdown does; the
		// process stays, to be stopped with the others.
		if g, ok := s.m.(cell.GracefulCloser); ok {
			return nil, g.CloseGracefully()
		}
		return nil, s.m.Close()
	}
	return nil, errors.New("bench member: unknown operation " + op)
}

// Close closes every service.
func (s *memberServices) Close() error {
	return errors.Join(s.soak.Close(), s.attack.Close(), s.scale.Close())
}
