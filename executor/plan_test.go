package executor

import "testing"

func TestKindStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{RouteOne.String(), "one"},
		{RouteOmniWrite.String(), "omni-write"},
		{RouteLocal.String(), "local"},
		{Route(200).String(), "Route(200)"},
		{SavepointRollbackTo.String(), "ROLLBACK TO SAVEPOINT"},
		{SavepointKind(9).String(), "SavepointKind(9)"},
		{DescribeAll.String(), "all"},
		{Describe(7).String(), "Describe(7)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestPlanSQLFor(t *testing.T) {
	p := &Plan{SQL: "INSERT all", PerShard: map[int]string{1: "INSERT one"}}
	if p.SQLFor(0) != "INSERT all" || p.SQLFor(1) != "INSERT one" {
		t.Fatalf("SQLFor: %q %q", p.SQLFor(0), p.SQLFor(1))
	}
}
