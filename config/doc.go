// Package config loads, checks and describes shardgate's configuration.
//
// A Config is one immutable snapshot of a YAML file (docs/config.md lists
// every option). The package holds no runtime state and imports nothing
// else of shardgate's: the running proxy keeps the current snapshot behind
// one atomic pointer of its own and swaps it on reload, and components read
// it when a client logs in or checks a server out.
//
// # Loading
//
// Load reads a file and Parse takes its bytes; both build a Config in four
// steps (load.go) and return either a fully valid Config or every problem
// found, never a partly valid one:
//
//  1. YAML to a node tree (gopkg.in/yaml.v3). A file holds one document; a
//     panic of the YAML parser is recovered and reported as an error, so a
//     bad file cannot take a running proxy down on reload.
//  2. The tree to a Config that starts from the defaults (decode.go). The
//     decoder is stricter than yaml.v3's: an unknown key is an error that
//     suggests the key meant (suggest.go, which also knows PgBouncer's and
//     PgDog's names for our options), types are checked, durations need a
//     unit ("5s"), and ${ENV} in any scalar is expanded first (env.go). It
//     records the position of every value, and bounds what aliases may
//     expand to (maxNodes) and refuses alias cycles.
//  3. Defaults that depend on other values (defaults.go): each database's
//     `pool:` and `load_balancing:` are partial overrides of the top-level
//     ones and Database.Pool and Database.LoadBalancing hold the result;
//     users inherit auth_type and default their server credentials (a SCRAM
//     verifier is not a server password); shards default their database
//     name; relative TLS file names are taken from the config file's
//     directory.
//  4. Validation (validate.go; sharded tables, list and range mappings,
//     sharded schemas and omni tables in validate_sharding.go), which checks
//     every rule.
//
// Consumers never see zero values meaning "unset": every default is filled.
// The exceptions are TLS, nil when the file has no tls section (no TLS
// towards clients, sslmode prefer towards servers; see
// Config.ServerSSLMode), and optional pointers such as
// ShardedTable.DefaultShard.
//
// # Environment
//
// ${NAME} is replaced by the variable's value and fails when it is unset;
// ${NAME:-default} uses default when NAME is unset or empty, as the shell
// does; $${ is a literal ${. Expanded values are not expanded again. Secrets
// (passwords) usually come this way.
//
// # Errors
//
// Every problem is an *Error with the file, line, column and option path
// ("databases[0].pool.size") of the value at fault, printed the way
// compilers print errors so that editors can jump to it. Load, Parse and
// Validate return them all, in file order, as an ErrorList (errors.go); past
// 100 a last entry counts the rest. A value that failed to decode is not
// validated again, and a missing key next to an unknown one is not reported
// (it is most likely the misspelled one). No message ever contains a
// password: the values of password keys, and what stood between the braces
// of a failed ${…} in one, are never echoed.
//
// # Snapshots
//
// Snapshots are not modified after loading. A reload loads a new one. Code
// that derives a snapshot from another (an admin SET, a resharding cutover)
// works on a Clone (clone.go), which shares no memory with the original,
// and calls Validate, whose errors then carry option paths but no lines.
// Redacted replaces every password set with "<redacted>", and YAML
// (encode.go) prints a snapshot with every effective value, in a form that
// loads back to the same Config: `proxy check-config` prints
// Redacted().YAML().
//
// # SCRAM verifiers
//
// A user's password may be a SCRAM-SHA-256 verifier in the format
// PostgreSQL stores in pg_authid.rolpassword. scram.go parses and computes
// verifiers (PBKDF2-HMAC-SHA-256 written out, because crypto/pbkdf2 refuses
// short passwords in FIPS 140-only mode), for the proxy's client
// authentication. Passwords go through SASLprep first, as PostgreSQL's
// pg_saslprep does, so that verifiers match those of pg_authid and libpq
// (saslprep.go; gen_saslprep.py generates saslprep_tables.go from the
// Unicode 3.2 stringprep tables that RFC 3454 and PostgreSQL use). See
// https://www.postgresql.org/docs/current/sasl-authentication.html.
//
// # Tests that pin the format
//
// docs_test.go keeps docs/config.md in step with the types and defaults
// (every option has a row with its default), and loads
// examples/shardgate.yaml and the example of DESIGN.md section 7, the
// public surface of the format. FuzzParse feeds the loader arbitrary files.
package config
