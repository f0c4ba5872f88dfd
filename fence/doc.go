// Package fence is the resource side of fencing: a storage service that
// receives writes from lock holders or elected leaders checks their
// fencing tokens here and refuses any token lower than one it has
// already admitted, so a holder that lost its lock (paused, partitioned)
// can never overwrite a newer holder's work.
//
// It imports only the standard library, so a service that only checks
// tokens does not link Raft, Pebble or the rest of coord. The root
// package re-exports its names (coord.Token is fence.Token), so tokens
// pass between the two without conversion.
//
// A Fence keeps per-resource high-water marks in a MarkStore: NewMemMarks
// for a process that is itself the resource, OpenFileMarks for marks that
// must survive restarts, or an implementation over the resource's own
// storage. SetToken, TokenFrom and Fence.Middleware carry tokens over HTTP.
// See ARCHITECTURE.md in the module root for how tokens are made.
package fence
