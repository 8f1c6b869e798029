// Package config loads, checks and describes shardgate's configuration.
//
// A Config is one immutable snapshot of a YAML file (docs/config.md lists
// every option). Load and Parse build it in four steps:
//
//  1. YAML to a node tree (gopkg.in/yaml.v3), one document per file.
//  2. The tree to a Config that starts from the defaults (decode.go). The
//     decoder is strict: an unknown key is an error that suggests the key
//     meant, types are checked, durations need a unit ("5s"), and ${ENV} or
//     ${ENV:-default} in any scalar is expanded first. It records the
//     position of every value.
//  3. Defaults that depend on other values (defaults.go): each database's
//     `pool:` is a partial override of the top-level pool and Database.Pool
//     holds the result; users inherit auth_type and default their server
//     credentials; shards default their database name.
//  4. Validation (validate.go, validate_sharding.go), which checks every rule
//     and reports every problem with the file, line and column of the
//     offending value, in an ErrorList.
//
// Consumers never see zero values meaning "unset": every default is filled.
// The exceptions are TLS, nil when the file has no tls section (no TLS
// towards clients, sslmode prefer towards servers; see
// Config.ServerSSLMode), and optional pointers such as
// ShardedTable.DefaultShard.
//
// Snapshots are not modified after loading. Reload loads a new one; code
// that derives a snapshot from another (a resharding cutover) works on a
// Clone and calls Validate. Redacted and YAML print a snapshot without its
// passwords, as `proxy check-config` does.
//
// scram.go holds the SCRAM-SHA-256 verifier format that user passwords may
// use, shared with the frontend's client authentication.
package config
