package wire

import "testing"

// TestCodes checks a few generated constants against the SQLSTATEs of
// PostgreSQL's manual (Appendix A), including the names the generator
// qualifies by class because PostgreSQL uses them twice.
func TestCodes(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"UndefinedTable", UndefinedTable, "42P01"},
		{"FeatureNotSupported", FeatureNotSupported, "0A000"},
		{"InternalError", InternalError, "XX000"},
		{"AdminShutdown", AdminShutdown, "57P01"},
		{"ProtocolViolation", ProtocolViolation, "08P01"},
		{"InvalidSQLStatementName", InvalidSQLStatementName, "26000"},
		{"InFailedSQLTransaction", InFailedSQLTransaction, "25P02"},
		{"StringDataRightTruncation", StringDataRightTruncation, "22001"},
		{"WarningStringDataRightTruncation", WarningStringDataRightTruncation, "01004"},
		{"NullValueNotAllowed", NullValueNotAllowed, "22004"},
		{"ExternalRoutineInvocationNullValueNotAllowed", ExternalRoutineInvocationNullValueNotAllowed, "39004"},
		{"SQLRoutineModifyingSQLDataNotPermitted", SQLRoutineModifyingSQLDataNotPermitted, "2F002"},
		{"ExternalRoutineModifyingSQLDataNotPermitted", ExternalRoutineModifyingSQLDataNotPermitted, "38002"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
			}
		})
	}
}
