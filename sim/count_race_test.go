//go:build race

package sim

// Under the race detector each history costs several times more.
const defaultSeeds = 6
