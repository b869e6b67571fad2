package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// An on-disk store is its head written whole to one file: every series'
// labels and XOR chunks, then a CRC-32C of all that precedes it. It is
// rewritten every SnapshotInterval and on Close, through a temporary file
// and a rename, so a crash leaves the previous snapshot whole.
const (
	snapshotFile  = "store.snapshot"
	snapshotMagic = "WHYSLOW-STORE-1\n"
	// SnapshotInterval is how often an on-disk store writes its snapshot:
	// at most this much of the newest data is lost to a crash.
	SnapshotInterval = time.Minute
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeSnapshot renders the head. The caller holds at least the read lock.
func (h *head) encodeSnapshot() []byte {
	b := []byte(snapshotMagic)
	b = binary.AppendUvarint(b, uint64(len(h.byRef)))
	for _, s := range h.byRef {
		b = binary.AppendUvarint(b, uint64(s.lset.Len()))
		s.lset.Range(func(l labels.Label) {
			b = appendString(b, l.Name)
			b = appendString(b, l.Value)
		})
		for _, cs := range [][]*chunk{s.chunks, s.ooo} {
			b = binary.AppendUvarint(b, uint64(len(cs)))
			for _, c := range cs {
				b = binary.AppendVarint(b, c.mint)
				b = binary.AppendVarint(b, c.maxt)
				b = appendString(b, string(c.xor.Bytes()))
			}
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// writeSnapshot writes the head into dir.
func (h *head) writeSnapshot(dir string) error {
	h.mu.RLock()
	data := h.encodeSnapshot()
	h.mu.RUnlock()
	path := filepath.Join(dir, snapshotFile)
	f, err := os.CreateTemp(dir, snapshotFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("write store snapshot: %w", err)
	}
	_, err = f.Write(data)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write store snapshot %s: %w", path, err)
	}
	return nil
}

// readSnapshot fills an empty head from a snapshot. Anything that does not
// decode to well-formed series and chunks is an error naming the first
// fault.
func (h *head) readSnapshot(data []byte) error {
	if len(data) < len(snapshotMagic)+4 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return errors.New("not a whyslow store snapshot")
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(data[len(data)-4:]) {
		return errors.New("store snapshot checksum mismatch (truncated or corrupt)")
	}
	d := &snapshotDecoder{b: body[len(snapshotMagic):]}
	n := d.count()
	for i := 0; i < n && d.err == nil; i++ {
		lset := d.labels()
		sorted, ooo := d.chunks(), d.chunks()
		if d.err != nil {
			break
		}
		if h.lookup(lset) != nil {
			return fmt.Errorf("store snapshot: series %s twice", lset)
		}
		s := h.getOrCreate(lset)
		if err := s.restore(sorted, ooo); err != nil {
			return fmt.Errorf("store snapshot: series %s: %w", lset, err)
		}
		for _, c := range slices.Concat(sorted, ooo) {
			h.minT, h.maxT = min(h.minT, c.mint), max(h.maxT, c.maxt)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d bytes after the last series", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("store snapshot: %w", d.err)
	}
	return nil
}

// restore checks each chunk's samples against its stated range (in time
// order, first at mint, last at maxt) and the in-order chunks against each
// other, then keeps them, full.
func (s *series) restore(sorted, ooo []*chunk) error {
	prev := int64(math.MinInt64)
	for i, c := range slices.Concat(sorted, ooo) {
		last, lastV, err := c.verify()
		if err != nil {
			return fmt.Errorf("chunk %d: %w", i, err)
		}
		if i < len(sorted) {
			if c.mint <= prev {
				return fmt.Errorf("chunk %d overlaps the one before", i)
			}
			prev, s.lastV = last, math.Float64bits(lastV)
		}
	}
	s.chunks, s.ooo = sorted, ooo
	return nil
}

func (c *chunk) verify() (last int64, lastV float64, err error) {
	it := c.xor.Iterator(nil)
	n := 0
	for it.Next() == chunkenc.ValFloat {
		t, v := it.At()
		if (n == 0 && t != c.mint) || (n > 0 && t <= last) {
			return 0, 0, fmt.Errorf("sample %d at %d out of order or off the chunk's start %d", n, t, c.mint)
		}
		last, lastV = t, v
		n++
	}
	switch {
	case it.Err() != nil:
		return 0, 0, it.Err()
	case n == 0 || n != c.xor.NumSamples():
		return 0, 0, fmt.Errorf("%d samples readable of %d", n, c.xor.NumSamples())
	case last != c.maxt:
		return 0, 0, fmt.Errorf("last sample at %d, chunk says %d", last, c.maxt)
	}
	return last, lastV, nil
}

// snapshotDecoder reads a snapshot body; the first fault sticks in err.
type snapshotDecoder struct {
	b   []byte
	err error
}

func (d *snapshotDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated or corrupt %s", what)
	}
}

// number reads one varint with decode (binary.Uvarint or binary.Varint).
func number[T int64 | uint64](d *snapshotDecoder, what string, decode func([]byte) (T, int)) T {
	v, n := decode(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *snapshotDecoder) uvarint(what string) uint64 { return number(d, what, binary.Uvarint) }
func (d *snapshotDecoder) varint(what string) int64   { return number(d, what, binary.Varint) }

// count reads a count, bounded by the bytes left (every item takes one).
func (d *snapshotDecoder) count() int {
	v := d.uvarint("count")
	if v > uint64(len(d.b)) {
		d.fail("count")
		return 0
	}
	return int(v)
}

func (d *snapshotDecoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail(what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *snapshotDecoder) labels() labels.Labels {
	n := d.count()
	if n == 0 {
		d.fail("labels (none)")
	}
	b := labels.NewScratchBuilder(n)
	for i := 0; i < n && d.err == nil; i++ {
		b.Add(string(d.bytes("label name")), string(d.bytes("label value")))
	}
	b.Sort()
	lset := b.Labels()
	if _, dup := lset.HasDuplicateLabelNames(); d.err == nil && dup {
		d.err = fmt.Errorf("series %s has a label twice", lset)
	}
	return lset
}

func (d *snapshotDecoder) chunks() []*chunk {
	n := d.count()
	var out []*chunk
	for i := 0; i < n && d.err == nil; i++ {
		c := &chunk{mint: d.varint("chunk start"), maxt: d.varint("chunk end")}
		data := d.bytes("chunk")
		if d.err != nil {
			break
		}
		xc, err := chunkenc.FromData(chunkenc.EncXOR, data)
		if err != nil || len(data) < 2 {
			d.fail("chunk")
			break
		}
		c.xor = xc.(*chunkenc.XORChunk)
		out = append(out, c)
	}
	return out
}
