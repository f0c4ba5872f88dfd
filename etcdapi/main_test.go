package etcdapi

import (
	"testing"

	_ "github.com/stretchr/testify/require"
	_ "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
