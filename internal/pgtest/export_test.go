package pgtest

// Seams for pgtest_test.
var (
	CompareVersions = compareVersions
	ErrNoBinaries   = errNoBinaries
	ProcessesIn     = processesIn
)

// DirForTest returns the directory that holds c's data directory and log.
func (c *Cluster) DirForTest() string { return c.dir }

var ErrPortInUse = errPortInUse
