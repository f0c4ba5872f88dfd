package spi

import (
	"testing"

	"github.com/coordcell/coord/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }
