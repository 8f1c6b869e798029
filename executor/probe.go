package executor

import (
	"errors"

	"github.com/shardgate/shardgate/wire"
)

// Parse probes.
//
// A plan whose Merge is a ParseOnly probe (router/probe.go) is a
// statement the router refuses, most often a write naming a table it
// cannot place: the shards must tell the client PostgreSQL's own error
// when the statement does not even parse, and must not run it (COPY,
// which Parse does not analyse, has its query parsed or its table looked
// up instead: probeMessages). Each
// shard's server gets, after the settings sync and the transaction's
// BEGIN and log (Prefix), Parse of the statement as the unnamed
// statement, Close of it and Sync. Parse analyses the statement — every
// relation, column, function and type resolved, as PostgreSQL does before
// it runs anything — and executes nothing; the Close leaves the server
// without a statement of the client's. Inside a transaction a failed
// Parse aborts it on that shard, as the client's own error aborts the
// client's transaction.

var errMalformedReady = errors.New("malformed ReadyForQuery from server")

// closeUnnamedSync closes the unnamed statement and syncs.
var closeUnnamedSync = []byte{'C', 0, 0, 0, 6, 'S', 0, 'S', 0, 0, 0, 4}

// probeMessages are the messages of the probe of plan p on shard i: the
// statement's Parse, or its COPY query's (Merge.ProbeSQL), or the lookup
// of its COPY table (Merge.ProbeRelation), which runs a SELECT of one
// cast; then Close and Sync.
func probeMessages(p *Plan, i int) []byte {
	m := p.Merge
	var out []byte
	switch {
	case m.ProbeRelation != "":
		// A text parameter, cast when the SELECT runs: an error while
		// Bind reads a parameter would carry a CONTEXT line of its own.
		out = appendParse(out, "SELECT $1::pg_catalog.regclass", []uint32{oidText})
		out = appendBind(out, [][]byte{[]byte(m.ProbeRelation)}, nil)
		out = append(out, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0)
	case m.ProbeSQL != "":
		out = appendParse(out, m.ProbeSQL, nil)
	default:
		out = appendParse(out, p.SQLFor(i), p.ParamTypes)
	}
	return append(out, closeUnnamedSync...)
}

// parseProbe runs the probe of Answer a's plan on each of its shards and
// returns the first error a shard answered, else the plan's refusal
// (Merge.Probe). A failed server is a *ShardError.
func (s *Session) parseProbe(a *Answer) error {
	p := a.Plan
	prefixed := make([]int, len(p.Shards))
	for k, i := range p.Shards {
		srv := s.shards[i].server
		if s.Ready != nil {
			if err := s.Ready(i); err != nil {
				return s.lost(i, err)
			}
		}
		for _, q := range s.Prefix(i, false) {
			srv.W.Write(wire.AppendQuery(nil, q))
			prefixed[k]++
		}
		srv.W.Write(probeMessages(p, i))
		if err := srv.Flush(); err != nil {
			return s.lost(i, err)
		}
	}
	var firstErr *wire.Error
	for k, i := range p.Shards {
		srv := s.shards[i].server
		for range prefixed[k] {
			_, serr, err := ReadToReady(srv)
			if err != nil {
				return s.lost(i, err)
			}
			if serr != nil {
				// What the server's session is now is unknown.
				srv.Broken = true
				if firstErr == nil {
					firstErr = serr
				}
			}
		}
		serr, err := s.readProbe(i, a, k == 0)
		if err != nil {
			return err
		}
		if serr != nil && firstErr == nil {
			firstErr = serr
		}
	}
	if firstErr != nil {
		return firstErr
	}
	return p.Merge.Probe
}

// readProbe reads shard i's answer to a probe up to ReadyForQuery and
// returns its error; notices go to the client's sink when notices is
// set (from the first shard only: every shard parses alike, and
// PostgreSQL warns once).
func (s *Session) readProbe(i int, a *Answer, notices bool) (*wire.Error, error) {
	srv := s.shards[i].server
	var serr *wire.Error
	for {
		typ, raw, body, err := srv.R.Next()
		if err != nil {
			return nil, s.lost(i, err)
		}
		switch typ {
		case 'E':
			if serr == nil {
				serr = wire.ParseError(body)
				srv.NoteError(serr)
			}
			if serr.Fatal() {
				srv.Broken = true
			}
		case 'N':
			if notices && a.Sink != nil {
				a.Sink.Write(raw)
			}
		case 'S':
			srv.NoteParameter(body)
		case 'Z':
			if len(body) != 1 {
				return nil, s.lost(i, errMalformedReady)
			}
			return serr, nil
		}
	}
}
