// Package histcheck checks recorded histories of a cell's key-value
// operations for linearizability: one register per key holding a value
// and its version, as coord's Put, Put with IfVersion and Get see it. The
// fault tests and the simulator record what each call asked and what it
// returned; a write whose outcome is unknown stays open to the end of the
// history, as Jepsen treats it.
package histcheck

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation asked.
type Kind int

// The operations of the register model.
const (
	Put Kind = iota
	Get
	CAS // Put with IfVersion(Version)
)

// Input is an operation as called.
type Input struct {
	Kind    Kind
	Key     string
	Value   string
	Version int64 // CAS: the expected version (0: must not exist)
}

// Output is what the operation returned.
type Output struct {
	Ambiguous bool // a write whose outcome is unknown
	Found     bool // Get: the key existed
	Value     string
	Version   int64 // Get: the version read
	OK        bool  // CAS: it succeeded
	// Err is the call's error, for the report only (the model ignores it).
	Err string
}

type register struct {
	value   string
	version int64
}

// Model is the register model over Inputs and Outputs, partitioned by key.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return register{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(register), input.(Input), output.(Output)
		switch in.Kind {
		case Put:
			return true, register{value: in.Value, version: s.version + 1}
		case Get:
			if s.version == 0 {
				return !out.Found, s
			}
			return out.Found && out.Value == s.value && out.Version == s.version, s
		default: // CAS
			matches := s.version == in.Version
			next := s
			if matches {
				next = register{value: in.Value, version: s.version + 1}
			}
			if out.Ambiguous {
				return true, next // whatever happened, the state dictates
			}
			return out.OK == matches, next
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		switch in.Kind {
		case Put:
			return fmt.Sprintf("put(%s, %s) amb=%v %s", in.Key, in.Value, out.Ambiguous, out.Err)
		case Get:
			return fmt.Sprintf("get(%s) -> %v %s v%d %s", in.Key, out.Found, out.Value, out.Version, out.Err)
		default:
			return fmt.Sprintf("cas(%s, v%d, %s) -> %v amb=%v %s", in.Key, in.Version, in.Value, out.OK, out.Ambiguous, out.Err)
		}
	},
}

// Verdict is a check's result.
type Verdict int

// The verdicts.
const (
	Linearizable Verdict = iota
	NotLinearizable
	Undecided // the check ran out of time: the history is too large
)

// Check checks history against Model within timeout. When it is not
// linearizable, and visualize names a file prefix, it writes porcupine's
// visualisation to a temporary file and returns its path.
func Check(history []porcupine.Operation, timeout time.Duration, visualize string) (Verdict, string) {
	res, info := porcupine.CheckOperationsVerbose(Model, history, timeout)
	switch res {
	case porcupine.Ok:
		return Linearizable, ""
	case porcupine.Unknown:
		return Undecided, ""
	}
	if visualize == "" {
		return NotLinearizable, ""
	}
	f, err := os.CreateTemp("", visualize+"-*.html")
	if err != nil {
		return NotLinearizable, ""
	}
	defer f.Close()
	if porcupine.Visualize(Model, info, f) != nil {
		return NotLinearizable, ""
	}
	return NotLinearizable, f.Name()
}

// Failing returns the operations of the first key whose history alone is
// not linearizable, ordered by call, each described as the model does,
// with its call and return in the history's time units; nil if every
// key's history is linearizable (or undecided).
func Failing(history []porcupine.Operation, timeout time.Duration) []string {
	for _, ops := range Model.Partition(history) {
		if porcupine.CheckOperationsTimeout(Model, ops, timeout) != porcupine.Illegal {
			continue
		}
		sorted := append([]porcupine.Operation(nil), ops...)
		slices.SortFunc(sorted, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		out := make([]string, len(sorted))
		for i, op := range sorted {
			ret := "open"
			if op.Return < 1<<62 {
				ret = fmt.Sprint(op.Return)
			}
			out[i] = fmt.Sprintf("[%d, %s] worker %d: %s", op.Call, ret, op.ClientId, Model.DescribeOperation(op.Input, op.Output))
		}
		return out
	}
	return nil
}
