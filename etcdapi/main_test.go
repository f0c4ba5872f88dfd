package etcdapi

import (
	"testing"

	"github.com/coordcell/coord/internal/testmain"
	_ "github.com/stretchr/testify/require"
	_ "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { testmain.Run(m) }
