package spanstore

import (
	"encoding/binary"
	"math"

	"github.com/whyslow/whyslow/span"
)

// A span's name and attributes are held packed in one string, so that the
// garbage collector, which scans the store on every cycle, finds no
// pointers in them: the store holds two pointers a span (this string and
// its resource's attributes) instead of two per attribute.
//
// The packing: the name as a string reference, the attribute count as a
// uvarint, then per attribute its key as a string reference, its kind (one
// byte) and its value: a string as a uvarint length and the bytes, a number
// or boolean as 8 bytes (little-endian bits). A string reference is
// uvarint(id+1) of a string in the store's table, or 0, a uvarint length
// and the bytes.

// pack appends the packed form of name and as to buf, adding strings to
// the table, and returns it with the bytes charged for strings new to the
// table.
func (s *Store) pack(buf []byte, name string, as span.Attrs) ([]byte, int64) {
	var charged int64
	buf, charged = s.appendRef(buf, name, charged)
	buf = binary.AppendUvarint(buf, uint64(len(as)))
	for i := range as {
		a := &as[i]
		buf, charged = s.appendRef(buf, a.Key, charged)
		buf = append(buf, byte(a.Kind))
		switch a.Kind {
		case span.AttrInt:
			buf = binary.LittleEndian.AppendUint64(buf, uint64(a.Int()))
		case span.AttrFloat:
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(a.Float()))
		case span.AttrBool:
			var v uint64
			if a.Bool() {
				v = 1
			}
			buf = binary.LittleEndian.AppendUint64(buf, v)
		default:
			buf = binary.AppendUvarint(buf, uint64(len(a.Str)))
			buf = append(buf, a.Str...)
		}
	}
	return buf, charged
}

// appendRef appends a string reference to str: to the table when str is
// there or enters it now (charged to this span), else inline.
func (s *Store) appendRef(buf []byte, str string, charged int64) ([]byte, int64) {
	if str != "" {
		if id, ok, added := s.share(str); ok {
			if added {
				charged += strBytes(len(str))
			}
			return binary.AppendUvarint(buf, uint64(id)+1), charged
		}
	}
	buf = append(buf, 0)
	buf = binary.AppendUvarint(buf, uint64(len(str)))
	return append(buf, str...), charged
}

// unpack returns the name and attributes packed in p. Strings are
// substrings of p or the table's: no copies.
func (s *Store) unpack(p string) (string, span.Attrs) {
	name, p := s.readRef(p)
	n, p := readUvarint(p)
	if n == 0 {
		return name, nil
	}
	as := make(span.Attrs, n)
	for i := range as {
		var key string
		key, p = s.readRef(p)
		kind := span.AttrKind(p[0])
		p = p[1:]
		switch kind {
		case span.AttrInt, span.AttrFloat, span.AttrBool:
			bits := le64(p)
			p = p[8:]
			switch kind {
			case span.AttrInt:
				as[i] = span.IntAttr(key, int64(bits))
			case span.AttrFloat:
				as[i] = span.FloatAttr(key, math.Float64frombits(bits))
			default:
				as[i] = span.BoolAttr(key, bits != 0)
			}
		default:
			var l uint64
			l, p = readUvarint(p)
			as[i] = span.StringAttr(key, p[:l])
			p = p[l:]
		}
	}
	return name, as
}

func (s *Store) readRef(p string) (string, string) {
	id, p := readUvarint(p)
	if id > 0 {
		return s.strs[id-1], p
	}
	l, p := readUvarint(p)
	return p[:l], p[l:]
}

// readUvarint reads a uvarint the store wrote (so well-formed).
func readUvarint(p string) (uint64, string) {
	var v uint64
	for shift := 0; ; shift += 7 {
		c := p[0]
		p = p[1:]
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, p
		}
	}
}

// le64 reads 8 little-endian bytes.
func le64(p string) uint64 {
	_ = p[7]
	return uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
		uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
}
