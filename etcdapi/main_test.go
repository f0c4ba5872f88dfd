package etcdapi

import (
	"testing"

	"go.uber.org/goleak"
	_ "go.etcd.io/etcd/client/v3"
	_ "github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
