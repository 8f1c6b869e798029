//go:build noicu

package executor

import "errors"

// This build has no ICU (the noicu build tag): ICU collations are refused.

// icuAvailable says whether the proxy was built with ICU.
const icuAvailable = false

// icuCollator is never opened in this build.
type icuCollator struct {
	locale  string
	version string
}

var errNoICU = errors.New("the proxy was built without ICU (the noicu build tag)")

func openICU(string) (*icuCollator, error) { return nil, errNoICU }

func (c *icuCollator) strcoll(a, b []byte) (int, error) { return 0, errNoICU }
