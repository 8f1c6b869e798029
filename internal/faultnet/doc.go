// Package faultnet is a TCP relay for fault-injection tests, and the
// seeded schedule of faults that the chaos tests run.
//
// A Relay listens on 127.0.0.1 and forwards every connection it accepts
// to one target address (a PostgreSQL server, say). While it runs, a
// test can, per direction (ToTarget: client to server; FromTarget:
// server to client):
//
//   - delay bytes (SetDelay): each chunk is written d after it was read,
//     without delaying the chunks behind it any further, as added network
//     latency would;
//   - blackhole them (SetBlackhole): bytes are read and dropped, the
//     connection stays open. A TCP stream cannot go on past a gap, so a
//     connection that lost bytes is cut when its blackhole is lifted, as a
//     real connection would die of its retransmission timeout;
//
// and for every connection:
//
//   - cut it (Cut): both sides are closed with SO_LINGER 0, so that the
//     peers see a reset rather than an orderly end;
//   - refuse new ones (SetRefuse): they are accepted and reset at once.
//
// Every method is safe for concurrent use. Close stops the relay and waits
// for its goroutines.
//
// Plan turns a seed into a Schedule: timed fault Events over a run (cut,
// blackhole, delay or refuse a shard's relay, stop or kill a proxy,
// restart PostgreSQL). The same seed and options give the same schedule,
// so a failing run can be replayed from its seed; the test that runs it
// maps each Event onto relays and processes.
package faultnet
