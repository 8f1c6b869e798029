package admin

import (
	"context"
	"time"

	"github.com/shardgate/shardgate/wire"
)

// Cluster is this proxy's cluster, for SHOW CLUSTER and SHOW TOPOLOGY
// (internal/proxy adapts cluster.Member); nil: the proxy runs alone.
type Cluster interface {
	Members(ctx context.Context) ([]ClusterMember, error)
	Generations(ctx context.Context) ([]ClusterGeneration, error)
	// Tasks lists the resharding tasks the other proxies published.
	Tasks(ctx context.Context) ([]ClusterTask, error)
	// Forward runs command ("cutover" or "stop") on the proxy that runs
	// task id, and waits for it.
	Forward(ctx context.Context, command string, id int) error
	// Pauses lists each proxy's own pause in the last cutover of each
	// database, for SHOW CUTOVERS.
	Pauses(ctx context.Context) ([]ClusterPause, error)
}

// ClusterPause is one proxy's pause in the last cutover of a database:
// the coordinator's runs from the cutover's start to its resume (the
// pause of SHOW TASKS), a member's from the coordinator's notification to
// its own resume.
type ClusterPause struct {
	Database, Proxy string
	Task            int    // 0: unknown
	Role            string // coordinator | member
	Outcome         string // done | aborted
	Pause           time.Duration
	At              time.Time // when the proxy resumed
}

// ClusterTask is a task of another proxy, as SHOW TASKS lists it.
type ClusterTask struct {
	ID                               int
	Proxy                            string
	Kind, Source, Dest, State, Phase string
	Started                          time.Time
	Elapsed, Pause                   time.Duration
	Error, Publications, Slots       string
}

// ClusterMember is one proxy of the cluster.
type ClusterMember struct {
	Name   string
	PID    int32 // its listening session on the control database
	Live   bool
	Self   bool
	Joined time.Time
}

// ClusterGeneration is one recorded switch of a database's topology.
type ClusterGeneration struct {
	Database   string
	Generation int64
	TakenFrom  string
	Switched   time.Time
	SwitchedBy string
	Running    bool // this proxy runs that topology now
}

var clusterSpecs = []*spec{
	{words: []string{"SHOW", "CLUSTER"}, usage: "SHOW CLUSTER", help: "the proxies of this proxy's cluster",
		columns: clusterColumns, tag: "SHOW", run: (*Handler).showCluster},
	{words: []string{"SHOW", "TOPOLOGY"}, usage: "SHOW TOPOLOGY", help: "the cluster's recorded topology generations (cutovers)",
		columns: topologyColumns, tag: "SHOW", run: (*Handler).showTopology},
	{words: []string{"SHOW", "CUTOVERS"}, usage: "SHOW CUTOVERS",
		help:    "each proxy's traffic pause in the last cutover of each database (pause in microseconds)",
		columns: cutoverColumns, tag: "SHOW", run: (*Handler).showCutovers},
}

var cutoverColumns = []column{
	text("database"), num("task"), text("proxy"), text("role"), text("outcome"), num("pause"), text("resumed"),
}

var clusterColumns = []column{text("name"), flag("self"), flag("live"), num("pid"), text("joined")}

var topologyColumns = []column{
	text("database"), num("generation"), text("shards_of"), text("switched"), text("switched_by"), flag("running"),
}

// errNoCluster answers the cluster commands of a proxy without a cluster.
func errNoCluster() error {
	return &wire.Error{Severity: "ERROR", Code: wire.ObjectNotInPrerequisiteState,
		Message: "this proxy is not part of a cluster", Hint: "add a cluster section to the configuration (docs/cluster.md)"}
}

func (h *Handler) showCluster(ctx context.Context, x *call) (*result, error) {
	if h.Cluster == nil {
		return nil, errNoCluster()
	}
	ms, err := h.Cluster.Members(ctx)
	if err != nil {
		return nil, wire.Errorf(wire.SystemError, "%v", err)
	}
	r := &result{}
	for _, m := range ms {
		r.add(m.Name, m.Self, m.Live, int64(m.PID), m.Joined.UTC().Format(time.RFC3339))
	}
	return r, nil
}

func (h *Handler) showTopology(ctx context.Context, x *call) (*result, error) {
	if h.Cluster == nil {
		return nil, errNoCluster()
	}
	gs, err := h.Cluster.Generations(ctx)
	if err != nil {
		return nil, wire.Errorf(wire.SystemError, "%v", err)
	}
	r := &result{}
	for _, g := range gs {
		r.add(g.Database, g.Generation, g.TakenFrom, g.Switched.UTC().Format(time.RFC3339), g.SwitchedBy, g.Running)
	}
	return r, nil
}

func (h *Handler) showCutovers(ctx context.Context, x *call) (*result, error) {
	if h.Cluster == nil {
		return nil, errNoCluster()
	}
	ps, err := h.Cluster.Pauses(ctx)
	if err != nil {
		return nil, wire.Errorf(wire.SystemError, "%v", err)
	}
	r := &result{}
	for _, p := range ps {
		r.add(p.Database, p.Task, p.Proxy, p.Role, p.Outcome, p.Pause, p.At)
	}
	return r, nil
}
