package executor

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// inet is PostgreSQL's inet and cidr value: a family, a netmask length and
// the address bytes (src/include/utils/inet.h).
type inet struct {
	family byte // PGSQL_AF_INET (2) or PGSQL_AF_INET6 (3)
	bits   int
	addr   []byte // 4 or 16 bytes
}

const (
	pgsqlAFInet  = 2 // AF_INET + 0
	pgsqlAFInet6 = 3 // AF_INET + 1
)

// cmp is network_cmp_internal (src/backend/utils/adt/network.c): IPv4
// before IPv6; within a family, by the bits both netmasks cover, then the
// shorter netmask first, then by the whole address. inet and cidr compare
// alike.
func (a inet) cmp(b inet) int {
	if a.family != b.family {
		return cmpInt64(int64(a.family), int64(b.family))
	}
	if c := bitncmp(a.addr, b.addr, min(a.bits, b.bits)); c != 0 {
		return c
	}
	if c := cmpInt64(int64(a.bits), int64(b.bits)); c != 0 {
		return c
	}
	return bitncmp(a.addr, b.addr, 8*len(a.addr))
}

// bitncmp compares the first n bits of a and b, as network.c's bitncmp.
func bitncmp(a, b []byte, n int) int {
	whole := n / 8
	if c := bytes.Compare(a[:whole], b[:whole]); c != 0 {
		return c
	}
	if rest := n % 8; rest > 0 {
		mask := byte(0xff << (8 - rest))
		return cmpInt64(int64(a[whole]&mask), int64(b[whole]&mask))
	}
	return 0
}

// textInet reads inet_out/cidr_out text: an address, "/bits" unless it is
// the whole address (always present for cidr).
func textInet(s string) (inet, error) {
	addrPart, bitsPart, hasBits := strings.Cut(s, "/")
	ip, err := netip.ParseAddr(addrPart)
	if err != nil || ip.Zone() != "" {
		return inet{}, fmt.Errorf("invalid inet %q", s)
	}
	v := inet{family: pgsqlAFInet6}
	if ip.Is4() {
		v.family = pgsqlAFInet
		a := ip.As4()
		v.addr = a[:]
	} else {
		a := ip.As16()
		v.addr = a[:]
	}
	v.bits = 8 * len(v.addr)
	if hasBits {
		n, ok := digits(bitsPart)
		if !ok || n > int64(v.bits) {
			return inet{}, fmt.Errorf("invalid inet %q", s)
		}
		v.bits = int(n)
	}
	return v, nil
}

// binaryInet decodes inet_send: family, bits, is_cidr, address length,
// address.
func binaryInet(b []byte) (inet, error) {
	if len(b) < 4 || int(b[3]) != len(b)-4 || (b[0] != pgsqlAFInet && b[0] != pgsqlAFInet6) ||
		(b[0] == pgsqlAFInet && b[3] != 4) || (b[0] == pgsqlAFInet6 && b[3] != 16) || int(b[1]) > 8*int(b[3]) {
		return inet{}, fmt.Errorf("invalid binary inet")
	}
	return inet{family: b[0], bits: int(b[1]), addr: b[4:]}, nil
}

func cmpTextInet(a, b []byte) (int, error) {
	x, err := textInet(string(a))
	if err != nil {
		return 0, err
	}
	y, err := textInet(string(b))
	if err != nil {
		return 0, err
	}
	return x.cmp(y), nil
}

func cmpBinaryInet(a, b []byte) (int, error) {
	x, err := binaryInet(a)
	if err != nil {
		return 0, err
	}
	y, err := binaryInet(b)
	if err != nil {
		return 0, err
	}
	return x.cmp(y), nil
}

// cmpBinaryBit is bit_cmp (src/backend/utils/adt/varbit.c) over
// bit_send/varbit_send values (int32 bit length, then the bits, padded
// with zeros): memcmp over the shorter byte length, then the shorter bit
// string first. The text form, '0' and '1' characters, orders alike byte
// by byte.
func cmpBinaryBit(a, b []byte) (int, error) {
	if len(a) < 4 || len(b) < 4 {
		return 0, fmt.Errorf("invalid binary bit string")
	}
	la, lb := int32(binary.BigEndian.Uint32(a)), int32(binary.BigEndian.Uint32(b))
	a, b = a[4:], b[4:]
	if c := bytes.Compare(a[:min(len(a), len(b))], b[:min(len(a), len(b))]); c != 0 {
		return c, nil
	}
	return cmpInt64(int64(la), int64(lb)), nil
}

// cmpTextBytea compares byteaout text, in either bytea_output: hex
// ("\x0102") or escape (printable bytes as themselves, "\\" and "\ooo"),
// by the bytes it stands for (byteacmp: memcmp, then the shorter first).
func cmpTextBytea(a, b []byte) (int, error) {
	x, err := decodeBytea(a)
	if err != nil {
		return 0, err
	}
	y, err := decodeBytea(b)
	if err != nil {
		return 0, err
	}
	return bytes.Compare(x, y), nil
}

func decodeBytea(s []byte) ([]byte, error) {
	if h, ok := bytes.CutPrefix(s, []byte(`\x`)); ok {
		out := make([]byte, hex.DecodedLen(len(h)))
		if _, err := hex.Decode(out, h); err != nil {
			return nil, fmt.Errorf("invalid bytea %q", s)
		}
		return out, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			out = append(out, s[i])
			continue
		}
		switch {
		case i+1 < len(s) && s[i+1] == '\\':
			out = append(out, '\\')
			i++
		case i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) && s[i+1] <= '3':
			out = append(out, (s[i+1]-'0')<<6|(s[i+2]-'0')<<3|(s[i+3]-'0'))
			i += 3
		default:
			return nil, fmt.Errorf("invalid bytea %q", s)
		}
	}
	return out, nil
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// cmpTextChar compares "char" values as charout writes them since
// PostgreSQL 15 — a byte with the high bit set as "\ooo", the zero byte as
// "" — by the unsigned byte (btcharcmp).
func cmpTextChar(a, b []byte) (int, error) {
	x, err := charByte(a)
	if err != nil {
		return 0, err
	}
	y, err := charByte(b)
	if err != nil {
		return 0, err
	}
	return cmpInt64(int64(x), int64(y)), nil
}

func charByte(s []byte) (byte, error) {
	switch {
	case len(s) == 0:
		return 0, nil
	case len(s) == 1:
		return s[0], nil
	case len(s) == 4 && s[0] == '\\' && isOctal(s[1]) && isOctal(s[2]) && isOctal(s[3]) && s[1] <= '3':
		return (s[1]-'0')<<6 | (s[2]-'0')<<3 | (s[3] - '0'), nil
	}
	return 0, fmt.Errorf("invalid \"char\" %q", s)
}
