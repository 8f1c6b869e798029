package querygen

import (
	"fmt"
	"regexp"
	"strconv"
)

// param is a constant that the extended protocol sends as a Bind
// parameter: lit is its SQL literal, val the Go value a driver encodes.
type param struct {
	lit string
	val any
}

// paramToken stands for parameter n in a query being built; render
// replaces it.
var paramToken = regexp.MustCompile("\x00([0-9]+)\x00")

// bindable returns lit, or now and then a placeholder for a parameter of
// value val: Case.SQL has lit in its place, Case.ParamSQL $n.
func (b *builder) bindable(lit string, val any) string {
	if b.rng.IntN(100) >= 30 {
		return lit
	}
	b.params = append(b.params, param{lit: lit, val: val})
	return fmt.Sprintf("\x00%d\x00", len(b.params))
}

// bindableInt is bindable for an integer constant.
func (b *builder) bindableInt(n int64) string {
	return b.bindable(strconv.FormatInt(n, 10), n)
}

// render returns sql with each placeholder as its literal, and, when sql
// has placeholders, as $n with the parameters' values.
func (b *builder) render(sql string) (plain, withParams string, args []any) {
	plain = paramToken.ReplaceAllStringFunc(sql, func(m string) string {
		n, _ := strconv.Atoi(m[1 : len(m)-1]) // the token holds digits only
		return b.params[n-1].lit
	})
	if len(b.params) == 0 {
		return plain, "", nil
	}
	withParams = paramToken.ReplaceAllString(sql, "$$$1")
	for _, p := range b.params {
		args = append(args, p.val)
	}
	return plain, withParams, args
}

// clauseParam is bindableInt for a constant of LIMIT, OFFSET or HAVING.
func (b *builder) clauseParam(n int64, _ bool) string {
	return b.bindableInt(n)
}
