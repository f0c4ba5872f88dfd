//go:build !race

package sim

const defaultSeeds = 50
