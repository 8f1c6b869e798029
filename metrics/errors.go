package metrics

import "sync/atomic"

// sqlstateClasses are the SQLSTATE classes of PostgreSQL's Appendix A
// ("PostgreSQL Error Codes"). A class is the first two characters of a
// SQLSTATE; counting by class keeps the label's cardinality bounded no
// matter what servers send.
var sqlstateClasses = [...]string{
	"00", "01", "02", "03", "08", "09", "0A", "0B", "0F", "0L", "0P", "0Z",
	"20", "21", "22", "23", "24", "25", "26", "27", "28", "2B", "2D", "2F",
	"34", "38", "39", "3B", "3D", "3F", "40", "42", "44", "53", "54", "55",
	"57", "58", "72", "F0", "HV", "P0", "XX",
}

// otherClass labels SQLSTATEs whose class is not in Appendix A.
const otherClass = "other"

var classIndex = func() map[string]int {
	m := make(map[string]int, len(sqlstateClasses))
	for i, c := range sqlstateClasses {
		m[c] = i
	}
	return m
}()

// ErrorCounts counts errors by SQLSTATE class. Add allocates nothing; the
// zero value is ready to use.
type ErrorCounts struct {
	n [len(sqlstateClasses) + 1]atomic.Uint64 // the last counts otherClass
}

// Add counts one error with the given SQLSTATE.
func (e *ErrorCounts) Add(sqlstate string) {
	i := len(sqlstateClasses)
	if len(sqlstate) >= 2 {
		if j, ok := classIndex[sqlstate[:2]]; ok {
			i = j
		}
	}
	e.n[i].Add(1)
}

// Total returns the number of errors of every class.
func (e *ErrorCounts) Total() uint64 {
	var t uint64
	for i := range e.n {
		t += e.n[i].Load()
	}
	return t
}

// Each calls fn for every class with a non-zero count, in Appendix A order.
func (e *ErrorCounts) Each(fn func(class string, n uint64)) {
	for i := range e.n {
		n := e.n[i].Load()
		if n == 0 {
			continue
		}
		if i < len(sqlstateClasses) {
			fn(sqlstateClasses[i], n)
		} else {
			fn(otherClass, n)
		}
	}
}
