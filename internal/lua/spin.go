package lua

import (
	_ "embed"

	"github.com/redis/rueidis"
)

//go:embed spin_release.lua
var spinReleaseSrc string

// SpinRelease is the compare-and-delete release of the spin-lock baseline
// (internal/measure), kept here with every other script of the project.
var SpinRelease = rueidis.NewLuaScript(spinReleaseSrc)
