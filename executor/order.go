package executor

import (
	"fmt"
	"slices"

	"github.com/shardgate/shardgate/wire"
)

// OrderSource tells the merge how columns whose order depends on the
// database compare: text by its collation, enums by the order of their
// labels. The Sink of a merge implements it when it can — the frontend's
// client, from the shards' catalogs. Without one, text compares in byte
// order when Spec.Collation is "" (the C collation) and is refused
// otherwise, and enums are refused.
//
// ColumnOrders returns one ColumnOrder for each column index in need, or
// an error (0A000 with a hint) when it cannot prove how the shards order a
// column. p is the statement the shards ran (nil when unknown); cols are
// its result columns, as the first of p.Shards described them.
type OrderSource interface {
	ColumnOrders(p *Plan, cols []Column, need []int) ([]ColumnOrder, error)
}

// ColumnOrder is how one column's values compare.
type ColumnOrder struct {
	// Collation orders text types and arrays of them.
	Collation Collation
	// Enum lists an enum's labels in pg_enum.enumsortorder order; nil
	// unless the column is an enum.
	Enum []string
}

// OrderNeed says what the order of a type depends on.
type OrderNeed uint8

const (
	// OrderFixed: the type orders the same in every database.
	OrderFixed OrderNeed = iota
	// OrderCollation: text types and arrays of them, ordered by the
	// collation of the column.
	OrderCollation
	// OrderCatalog: a type the proxy does not know, which orders as the
	// catalog says if it is an enum.
	OrderCatalog
)

func (n OrderNeed) String() string {
	switch n {
	case OrderFixed:
		return "fixed"
	case OrderCollation:
		return "collation"
	case OrderCatalog:
		return "catalog"
	}
	return fmt.Sprintf("OrderNeed(%d)", uint8(n))
}

// firstNormalObjectID is PostgreSQL's FirstNormalObjectId: types with a
// smaller OID are built in, the same in every database; others (enums
// among them) are created by users.
const firstNormalObjectID = 16384

// NeedOf returns what the order of values of type oid depends on.
func NeedOf(oid uint32) OrderNeed {
	if elem, ok := arrayElem[oid]; ok {
		oid = elem
	}
	switch {
	case isTextType(oid):
		return OrderCollation
	case oid >= firstNormalObjectID:
		return OrderCatalog
	}
	return OrderFixed
}

// refusal is the 0A000 error of an order the merge cannot prove.
func refusal(msg, hint string) error {
	return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported, Message: msg, Hint: hint}
}

// buildComparators sets m.cmp for the columns in need, asking the sink
// (OrderSource) about those whose order depends on the database.
func (m *Merger) buildComparators(need []int) error {
	var ask []int
	for _, col := range need {
		if m.cmp[col] != nil {
			continue
		}
		c := m.cols[col]
		if NeedOf(c.OID) != OrderFixed {
			ask = append(ask, col)
			continue
		}
		f, err := comparator(c.OID, c.Format)
		if err != nil {
			return err
		}
		m.cmp[col] = f
	}
	if len(ask) == 0 {
		return nil
	}
	orders, err := m.orders(ask)
	if err != nil {
		return err
	}
	for i, col := range ask {
		f, err := orderedComparator(m.cols[col], orders[i])
		if err != nil {
			return err
		}
		m.cmp[col] = f
		if NeedOf(m.cols[col].OID) == OrderCollation {
			if m.colls == nil {
				m.colls = map[int]Collation{}
			}
			m.colls[col] = orders[i].Collation
		}
	}
	return nil
}

// orders returns how the columns ask compare, from the sink when it is an
// OrderSource.
func (m *Merger) orders(ask []int) ([]ColumnOrder, error) {
	if src, ok := m.out.(OrderSource); ok {
		orders, err := src.ColumnOrders(m.spec.Plan, m.cols, ask)
		if err != nil {
			return nil, err
		}
		if len(orders) != len(ask) {
			return nil, wire.Errorf(wire.InternalError, "merge: %d column orders for %d columns", len(orders), len(ask))
		}
		return orders, nil
	}
	for _, col := range ask {
		c := m.cols[col]
		switch {
		case NeedOf(c.OID) == OrderCatalog:
			return nil, refusal(fmt.Sprintf("cannot order column %q of type OID %d across shards", c.Name, c.OID),
				"the proxy orders a user-defined type only when the shards' catalog shows it is an enum; route the query to one shard")
		case m.spec.Collation != "":
			return nil, collationError(c, m.spec.Collation)
		}
	}
	return make([]ColumnOrder, len(ask)), nil // byte order
}

// orderedComparator returns the ordering of column c given how the
// database orders it.
func orderedComparator(c Column, o ColumnOrder) (compareFunc, error) {
	if elem, ok := arrayElem[c.OID]; ok {
		ef, err := orderedComparator(Column{Name: c.Name, OID: elem, Format: c.Format}, o)
		if err != nil {
			return nil, err
		}
		return arrayComparator(elem, c.Format, ef), nil
	}
	switch {
	case isTextType(c.OID):
		t := &textCompare{coll: o.Collation, bpchar: c.OID == oidBPChar}
		return t.compareFunc(), nil
	case o.Enum != nil:
		return enumComparator(o.Enum), nil
	}
	return nil, refusal(fmt.Sprintf("cannot order column %q of type OID %d across shards", c.Name, c.OID),
		"the proxy orders built-in types, text in the collations it can check, and enums; route the query to one shard")
}

// enumComparator orders enum values (the label, in text and binary
// formats alike: enum_send sends the label) by the labels' position,
// which is their pg_enum.enumsortorder order (enum_cmp).
func enumComparator(labels []string) compareFunc {
	pos := make(map[string]int, len(labels))
	for i, l := range labels {
		pos[l] = i
	}
	return func(a, b []byte) (int, error) {
		x, ok := pos[string(a)]
		if !ok {
			return 0, fmt.Errorf("enum value %q is not among the labels %v the catalog listed", a, labels)
		}
		y, ok := pos[string(b)]
		if !ok {
			return 0, fmt.Errorf("enum value %q is not among the labels %v the catalog listed", b, labels)
		}
		return cmpInt64(int64(x), int64(y)), nil
	}
}

// addNeed appends col to need unless it is there.
func addNeed(need []int, col int) []int {
	if slices.Contains(need, col) {
		return need
	}
	return append(need, col)
}
