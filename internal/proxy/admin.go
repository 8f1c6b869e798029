package proxy

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardgate/shardgate/admin"
	"github.com/shardgate/shardgate/cluster"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/replication"
)

// AdminView returns l as the admin database sees it (admin.Proxy). Package
// admin does not import frontend, the other package of its layer; this
// adapter is the only place that knows both.
func AdminView(l *frontend.Listener) admin.Proxy { return adminView{l} }

// AdminHandler returns h as the handler of l's admin database: set
// l.Admin to it.
func AdminHandler(h *admin.Handler) frontend.AdminHandler { return adminHandler{h} }

// adminHandler serves the frontend's admin connections with an
// admin.Handler; *frontend.AdminConn is an admin.Conn.
type adminHandler struct{ h *admin.Handler }

func (a adminHandler) Serve(ctx context.Context, ac *frontend.AdminConn) error {
	return a.h.Serve(ctx, ac)
}

// adminView is AdminView.
type adminView struct{ l *frontend.Listener }

func (v adminView) Config() *config.Config { return v.l.State().Config }
func (v adminView) Pools() *pool.Registry  { return v.l.State().Pools }

func (v adminView) Clients() []admin.Client {
	cs := v.l.Clients()
	out := make([]admin.Client, len(cs))
	for i, c := range cs {
		out[i] = admin.Client{ID: c.ID, Addr: c.Addr, User: c.User, Database: c.Database, AppName: c.AppName,
			State: c.State.String(), TLS: c.TLS, ConnectedAt: c.ConnectedAt, Queries: c.Queries, Session: c.Session}
	}
	return out
}

func (v adminView) DatabaseStatus(db string) admin.DatabaseStatus {
	s := v.l.DatabaseStatus(db)
	return admin.DatabaseStatus{Paused: s.Paused, Maintenance: s.Maintenance, Waiting: s.Waiting}
}

func (v adminView) Pause(ctx context.Context, db string) error { return v.l.Pause(ctx, db) }
func (v adminView) Resume(db string) error                     { return v.l.Resume(db) }
func (v adminView) SetMaintenance(db string, on bool) error    { return v.l.SetMaintenance(db, on) }
func (v adminView) Reconfigure(cfg *config.Config) error       { return v.l.Reconfigure(cfg) }
func (v adminView) Kill(id uint64) bool                        { return v.l.Kill(id) }

func (v adminView) InDoubt() []admin.InDoubt {
	var out []admin.InDoubt
	for _, d := range v.l.LastInDoubt() {
		out = append(out, admin.InDoubt{Database: d.Database, Shard: d.Shard, GID: d.GID.String(), TxID: d.GID.TxID,
			Coordinator: d.GID.Coord, Age: d.Age, State: d.Status})
	}
	return out
}

// ClusterView returns m as the admin database sees it (admin.Cluster).
func ClusterView(m *cluster.Member, l *frontend.Listener) admin.Cluster { return clusterView{m, l} }

type clusterView struct {
	m *cluster.Member
	l *frontend.Listener
}

func (v clusterView) Members(ctx context.Context) ([]admin.ClusterMember, error) {
	ms, err := v.m.Members(ctx)
	out := make([]admin.ClusterMember, len(ms))
	for i, m := range ms {
		out[i] = admin.ClusterMember{Name: m.Name, PID: m.PID, Live: m.Live, Self: m.Self, Joined: m.Joined}
	}
	return out, err
}

func (v clusterView) Generations(ctx context.Context) ([]admin.ClusterGeneration, error) {
	gs, err := v.m.Generations(ctx)
	cfg := v.l.State().Config
	out := make([]admin.ClusterGeneration, len(gs))
	for i, g := range gs {
		db := cfg.Database(g.Database)
		out[i] = admin.ClusterGeneration{Database: g.Database, Generation: g.Generation, TakenFrom: g.TakenFrom,
			Switched: g.Switched, SwitchedBy: g.SwitchedBy, Running: db != nil && cluster.Fingerprint(db) == g.Fingerprint}
	}
	return out, err
}

func (v clusterView) Tasks(ctx context.Context) ([]admin.ClusterTask, error) {
	ts, err := v.m.Tasks(ctx)
	out := make([]admin.ClusterTask, len(ts))
	for i, t := range ts {
		out[i] = admin.ClusterTask{ID: t.ID, Proxy: t.Proxy, Kind: t.Kind, Source: t.Source, Dest: t.Dest, State: t.State,
			Phase: t.Phase, Started: t.Started, Elapsed: t.Elapsed, Pause: t.Pause, Error: t.Error,
			Publications: t.Publications, Slots: t.Slots}
	}
	return out, err
}

func (v clusterView) Forward(ctx context.Context, command string, id int) error {
	return v.m.Forward(ctx, command, id)
}

func (v clusterView) Pauses(ctx context.Context) ([]admin.ClusterPause, error) {
	ps, err := v.m.Pauses(ctx)
	out := make([]admin.ClusterPause, len(ps))
	for i, p := range ps {
		out[i] = admin.ClusterPause{Database: p.Database, Proxy: p.Proxy, Task: p.Task, Role: p.Role, Outcome: p.Outcome,
			Pause: p.Pause, At: p.At}
	}
	return out, err
}

// taskHooks connect member to the task manager tasks of this proxy.
func taskHooks(member *cluster.Member, tasks *replication.Manager) cluster.TaskHooks {
	return cluster.TaskHooks{
		Tasks: func() []cluster.TaskRow {
			var out []cluster.TaskRow
			for _, t := range tasks.Tasks() {
				i := t.Info()
				row := cluster.TaskRow{ID: i.ID, Proxy: member.Name(), Kind: i.Kind.String(), Source: i.Source, Dest: i.Dest,
					State: i.State.String(), Phase: i.Phase.String(), Started: i.Started, Elapsed: i.Elapsed, Pause: i.Pause,
					Resumable: i.Resumable}
				if i.Err != nil {
					row.Error = i.Err.Error()
				}
				if i.Kind != replication.KindSchemaSync {
					row.Publications = strings.Join(t.Task.Publications(), ",")
					row.Slots = strings.Join(t.Task.SlotNames(), ",")
				}
				out = append(out, row)
			}
			return out
		},
		Run: func(ctx context.Context, command string, id int) error {
			var err error
			switch command {
			case "cutover":
				_, err = tasks.Cutover(ctx, id)
			case "stop":
				_, err = tasks.Stop(ctx, id)
			default:
				err = fmt.Errorf("unknown task command %q", command)
			}
			return err
		},
	}
}
