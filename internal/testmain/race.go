//go:build race

package testmain

const raceEnabled = true
