package wire

// OriginForTest is one entry of origins, for TestOriginsMatchPostgres.
type OriginForTest struct{ Code, Message string }

// OriginsForTest lists origins' codes and messages.
func OriginsForTest() []OriginForTest {
	out := make([]OriginForTest, len(origins))
	for i, o := range origins {
		out[i] = OriginForTest{o.code, o.message}
	}
	return out
}
