// Package etcdapi serves etcd's v3 gRPC API in front of a coord cell, so
// that etcdctl, go.etcd.io/etcd/client/v3 (and its concurrency package)
// and every language's etcd client use a coord cell unchanged.
//
// Run it on a member (or on a coord.Client) with Serve:
//
//	l, _ := net.Listen("tcp", ":2379")
//	go etcdapi.Serve(ctx, node, l, etcdapi.WithTLS(tlsConfig))
//
// Keys, values, revisions, versions and create/mod revisions are the
// cell's own; a lease is a coord session; errors are etcd's (rpctypes).
// docs/etcd.md in the repository says what is served, what answers
// Unimplemented, and how the semantics differ from etcd's.
package etcdapi
