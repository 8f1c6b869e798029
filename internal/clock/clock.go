// Package clock reads the time for what measures intervals (round trips,
// checkout waits, idle and lifetime limits) with one clock read where
// time.Now makes two: the wall clock's and the monotonic one, each about
// 100 ns on a virtual machine's kvm-clock.
//
// Its times are a fixed base taken at start moved by the monotonic time
// since, so their wall clock moves the same way: they are for intervals,
// not for display.
package clock

import "time"

// base is what Now and Mono count from. It is set once, at start.
var base = time.Now()

// Now is the time now, with a monotonic reading, in one clock read.
func Now() time.Time { return base.Add(time.Since(base)) }

// Mono is the monotonic time now as a Duration since the start: a third
// of a time.Time where a struct keeps one.
func Mono() time.Duration { return time.Since(base) }

// Of is t as Mono counts it: the Duration from the start to t.
func Of(t time.Time) time.Duration { return t.Sub(base) }

// At is the time whose Mono is d, the inverse of Of.
func At(d time.Duration) time.Time { return base.Add(d) }
