// Package proxy assembles a running shardgate from its parts: the
// frontend.Listener serving clients, the admin database, the resharding
// task manager, the metrics endpoint, SIGHUP reloads and the graceful
// shutdown. cmd/proxy parses flags and loads the configuration, then calls
// Run; a test binary calls Run as well, with Options.KnobsForTest set.
//
// This is the one package that knows every other one, so adapters between
// packages of the same layer (the Listener seen by package admin, for
// instance) live here rather than in either of them.
package proxy
