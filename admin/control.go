package admin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/replication"
	"github.com/shardgate/shardgate/wire"
)

// The commands that change the proxy.

// reloadConfig runs RELOAD. A configuration that does not load is an
// ErrorResponse (F0000) whose detail lists every problem as file:line; the
// running configuration stays.
func (h *Handler) reloadConfig(ctx context.Context, x *call) (*result, error) {
	if err := h.reload(); err != nil {
		if e, ok := wire.AsError(err); ok {
			return nil, e
		}
		return nil, &wire.Error{Severity: "ERROR", Code: wire.ConfigFileError,
			Message: "reload failed; the previous configuration stays in effect",
			Detail:  err.Error()}
	}
	return nil, nil
}

// database returns the optional database argument at i.
func database(x *call, i int) string {
	if i < len(x.args) {
		return x.args[i]
	}
	return ""
}

// pause runs PAUSE [db]: it returns once no client of db (or of any
// database) holds a server; until RESUME, new transactions wait.
func (h *Handler) pause(ctx context.Context, x *call) (*result, error) {
	if err := h.p.Pause(ctx, database(x, 0)); err != nil {
		if e, ok := wire.AsError(err); ok {
			return nil, e
		}
		return nil, wire.Errorf(wire.QueryCanceled, "%v (the database stays paused; RESUME undoes it)", err)
	}
	return nil, nil
}

func (h *Handler) resume(ctx context.Context, x *call) (*result, error) {
	return nil, h.p.Resume(database(x, 0))
}

// maintenance runs MAINTENANCE ON|OFF [db].
func (h *Handler) maintenance(ctx context.Context, x *call) (*result, error) {
	var on bool
	switch strings.ToUpper(x.args[0]) {
	case "ON":
		on = true
	case "OFF":
	default:
		return nil, &wire.Error{Severity: "ERROR", Code: wire.SyntaxError,
			Message: fmt.Sprintf("MAINTENANCE takes ON or OFF, not %q", x.args[0]), Hint: "usage: MAINTENANCE ON|OFF [db]"}
	}
	return nil, h.p.SetMaintenance(database(x, 1), on)
}

// settings are what SET changes at runtime, in every pool: the global
// default and each database's effective value. They last until the next
// RELOAD, which reads the file again.
var settings = map[string]func(cfg *config.Config, value string) error{
	"pool_size": func(cfg *config.Config, value string) error {
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 {
			return fmt.Errorf("pool_size must be a positive integer, not %q", value)
		}
		cfg.Pool.Size = n
		for i := range cfg.Databases {
			cfg.Databases[i].Pool.Size = n
		}
		return nil
	},
	"checkout_timeout": func(cfg *config.Config, value string) error {
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return fmt.Errorf("checkout_timeout must be a positive Go duration such as 5s, not %q", value)
		}
		cfg.Pool.CheckoutTimeout = d
		for i := range cfg.Databases {
			cfg.Databases[i].Pool.CheckoutTimeout = d
		}
		return nil
	},
}

// sessionSettings are settings drivers send on connect (JDBC, for
// instance); SET accepts and ignores them.
var sessionSettings = map[string]bool{
	"application_name": true, "client_encoding": true, "datestyle": true, "timezone": true,
	"extra_float_digits": true, "intervalstyle": true, "standard_conforming_strings": true,
}

// set runs SET name = value (or TO value). It derives a new configuration
// from the running one and installs it like a reload: pools whose settings
// change are replaced once their clients finish their transactions.
func (h *Handler) set(ctx context.Context, x *call) (*result, error) {
	args := x.args
	if len(args) == 3 && (args[1] == "=" || strings.EqualFold(args[1], "TO")) {
		args = []string{args[0], args[2]}
	}
	if len(args) != 2 {
		return nil, &wire.Error{Severity: "ERROR", Code: wire.SyntaxError, Message: "malformed SET",
			Hint: "usage: SET name = value"}
	}
	name := strings.ToLower(args[0])
	if sessionSettings[name] {
		return nil, nil
	}
	if ok, err := h.tasks().Set(name, args[1]); ok { // reshard.go
		return nil, reshardSetError(err)
	}
	apply, ok := settings[name]
	if !ok {
		return nil, &wire.Error{Severity: "ERROR", Code: wire.UndefinedObject,
			Message: fmt.Sprintf("unrecognized configuration parameter %q", args[0]),
			Hint:    "SET changes pool_size, checkout_timeout, " + strings.Join(replication.Settings, ", ")}
	}
	cfg := h.p.Config().Clone()
	if err := apply(cfg, args[1]); err != nil {
		return nil, wire.Errorf(wire.InvalidParameterValue, "%v", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, &wire.Error{Severity: "ERROR", Code: wire.InvalidParameterValue,
			Message: fmt.Sprintf("invalid value for %s", name), Detail: err.Error()}
	}
	if err := h.p.Reconfigure(cfg); err != nil {
		return nil, fmt.Errorf("set %s: %w", name, err)
	}
	return nil, nil
}

// kill runs KILL id: the client is closed with 57P01 at once, its
// transaction (if any) rolled back.
func (h *Handler) kill(ctx context.Context, x *call) (*result, error) {
	id, err := strconv.ParseUint(x.args[0], 10, 64)
	if err != nil {
		return nil, wire.Errorf(wire.InvalidParameterValue, "KILL takes a client id from SHOW CLIENTS, not %q", x.args[0])
	}
	if !h.p.Kill(id) {
		return nil, wire.Errorf(wire.UndefinedObject, "client %d not found", id)
	}
	return nil, nil
}

// shutdown runs SHUTDOWN: after the answer reaches the client, the proxy
// shuts down gracefully (as on SIGTERM).
func (h *Handler) shutdown(ctx context.Context, x *call) (*result, error) {
	if h.Shutdown == nil {
		return nil, wire.Errorf(wire.FeatureNotSupported, "SHUTDOWN is not available: this proxy was started without a shutdown hook")
	}
	return &result{after: h.Shutdown}, nil
}
