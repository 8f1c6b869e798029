package replication

// Knobs are the test seams of resharding tasks, in the manner of
// CockroachDB's testing knobs: optional hooks that tests set and production
// leaves zero. A Manager hands its KnobsForTest to every task it starts.
type Knobs struct {
	// StallCopy, when set, is asked once per table copy with the table's
	// name (schema.table). If it answers true, the copy, once it has sent
	// every row to the destination shards and before any of them commits,
	// waits until the task's context ends. The integration tests use it to
	// kill the proxy, or a destination, in the middle of a copy.
	StallCopy func(table string) bool

	// AtCutoverStage, when set, runs at each stage of a cutover that a
	// test may stop the process, or act as another proxy, at: "fenced"
	// (the source shards are fenced, the last catch-up has not begun),
	// "before-config-write" (the task recorded the source's shards, the
	// configuration file still names them), "after-config-write" (the
	// file names the destination's shards, the running configuration
	// does not yet) and "before-drop" (the proxy serves the destination's
	// shards; the slots on the old source shards are not dropped yet).
	AtCutoverStage func(stage string)

	// AtRunStart, when set, runs first in the goroutine that runs a task,
	// before anything of the run (its record, its claim, its steps).
	AtRunStart func()
}

// atRunStart runs AtRunStart, if set.
func (k *Knobs) atRunStart() {
	if k.AtRunStart != nil {
		k.AtRunStart()
	}
}

// stallCopy reports whether the copy of table must stall (StallCopy).
func (k *Knobs) stallCopy(table string) bool {
	return k.StallCopy != nil && k.StallCopy(table)
}

// atCutoverStage runs AtCutoverStage, if set.
func (k *Knobs) atCutoverStage(stage string) {
	if k.AtCutoverStage != nil {
		k.AtCutoverStage(stage)
	}
}
