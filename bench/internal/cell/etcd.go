package cell

// EtcdServer is implemented by cells whose members serve etcd's v3 gRPC
// API on loopback: etcd itself, and coord behind its etcdapi front. The
// etcd-* scenarios drive both through an unchanged clientv3 client, so
// the same calls meet each side's server over the same wire.
type EtcdServer interface {
	// EtcdEndpoints returns each member's gRPC endpoint
	// ("http://127.0.0.1:port"), by member number.
	EtcdEndpoints() []string
}
