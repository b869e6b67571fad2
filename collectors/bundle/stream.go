package bundle

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// Window is a closed time range [From, To] of samples to keep.
type Window struct {
	From, To time.Time
}

// blockSize is about how much kept text goes to textparse at a time: big
// enough that a parser per block costs nothing, small enough that memory
// stays flat.
var blockSize = 256 << 10 // a variable so tests can cross block boundaries

// headSize is how much of an unseekable stream is buffered to detect its
// format.
const headSize = 1 << 20

// NewStreamParser returns a parser that reads r line by line, a block of
// lines at a time, so that memory does not grow with the input. Errors name
// the same line and column as NewTextParser's. With o.Keep set, sample lines
// whose timestamp lies outside every window are dropped before textparse
// sees them (see Skipped); lines the quick check cannot read exactly go to
// textparse as they are, so that its errors stay. FormatAuto detects the
// format as DetectFormat does: from the end of the input when r is an
// io.ReadSeeker, else from the stream's first MiB, which must then hold it
// all (give the format otherwise).
func NewStreamParser(name string, r io.Reader, o LoadOptions) (*TextParser, error) {
	format := o.Format
	auto := format == FormatAuto
	if auto {
		var err error
		format, r, err = detectReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if format != FormatOpenMetrics && format != FormatPrometheusText {
		return nil, fmt.Errorf("%s: unknown format %s", name, format)
	}
	src := &blockReader{
		name:   name,
		r:      bufio.NewReaderSize(r, 64<<10),
		format: format,
		auto:   auto,
		keep:   spans(o.Keep),
		minT:   math.MaxInt64,
		maxT:   math.MinInt64,
	}
	p := &TextParser{name: name, format: format, src: src, syms: labels.NewSymbolTable()}
	if err := p.nextBlock(); err != nil {
		return nil, err
	}
	return p, nil
}

// Skipped returns how many sample lines were dropped before parsing for
// lying outside the kept windows, and the range of their timestamps in
// milliseconds (min > max when none).
func (p *TextParser) Skipped() (n int, minT, maxT int64) {
	if p.src == nil {
		return 0, math.MaxInt64, math.MinInt64
	}
	return p.src.skipped, p.src.minT, p.src.maxT
}

// nextBlock reads the next block of the stream and starts parsing it.
func (p *TextParser) nextBlock() error {
	data, lineNo, err := p.src.fill()
	if err != nil {
		return err
	}
	return p.reset(data, lineNo)
}

// span is a window in milliseconds.
type span struct{ from, to int64 }

func spans(ws []Window) []span {
	out := make([]span, 0, len(ws))
	for _, w := range ws {
		out = append(out, span{w.From.UnixMilli(), w.To.UnixMilli()})
	}
	return out
}

// keeps reports whether a sample at t (ms) falls in one of the windows (all
// of them when there are none).
func keeps(ws []span, t int64) bool {
	if len(ws) == 0 {
		return true
	}
	for _, w := range ws {
		if t >= w.from && t <= w.to {
			return true
		}
	}
	return false
}

// blockReader cuts a stream into blocks of whole lines for textparse. It
// drops the sample lines outside the kept windows, remembers each kept
// line's number (lineNo) so errors still name the input line, starts each
// block after the first with the last "# TYPE" line (textparse's only state
// across lines), and ends every OpenMetrics block but the last with a
// "# EOF" of its own.
type blockReader struct {
	name   string
	r      *bufio.Reader
	format Format
	auto   bool
	keep   []span

	n    int   // lines read
	read int64 // bytes read
	done bool  // the last block was returned

	lastType     []byte
	lastTypeLine int

	buf    []byte
	lineNo []int
	long   []byte

	skipped    int
	minT, maxT int64

	// omLike says a line read so far looks like OpenMetrics (classic text
	// only; see looksOpenMetrics).
	omLike bool
}

// line returns the next line with its newline (none at the end of input),
// or io.EOF.
func (b *blockReader) line() ([]byte, error) {
	l, err := b.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		b.long = append(b.long[:0], l...)
		for errors.Is(err, bufio.ErrBufferFull) {
			l, err = b.r.ReadSlice('\n')
			b.long = append(b.long, l...)
			if int64(len(b.long)) > maxMetricsSize {
				return nil, fmt.Errorf("read %s: larger than %d bytes", b.name, int64(maxMetricsSize))
			}
		}
		l = b.long
	}
	b.read += int64(len(l))
	if b.read > maxMetricsSize {
		return nil, fmt.Errorf("read %s: larger than %d bytes", b.name, int64(maxMetricsSize))
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", b.name, err)
	}
	if len(l) == 0 {
		return nil, io.EOF
	}
	b.n++
	if b.format == FormatPrometheusText && !b.omLike {
		b.omLike = lineLooksOpenMetrics(l)
	}
	return l, nil
}

// lineLooksOpenMetrics is looksOpenMetrics for one line.
func lineLooksOpenMetrics(l []byte) bool {
	if bytes.Contains(l, []byte("# UNIT ")) {
		return true
	}
	l = bytes.TrimSuffix(l, []byte("\n"))
	for _, s := range []string{" unknown", " stateset", " info", " gaugehistogram"} {
		if bytes.HasSuffix(l, []byte(s)) {
			return true
		}
	}
	return false
}

// looksOpenMetrics reports whether any line of the input, read or not yet
// read, looks like OpenMetrics: for the hint on a classic-text error.
func (b *blockReader) looksOpenMetrics() bool {
	for !b.omLike {
		if _, err := b.line(); err != nil {
			break
		}
	}
	return b.omLike
}

func (b *blockReader) add(l []byte, n int) {
	b.buf = append(b.buf, l...)
	b.lineNo = append(b.lineNo, n)
}

// fill returns the next block and its line numbers (one more entry than the
// block has lines: the line after it).
func (b *blockReader) fill() ([]byte, []int, error) {
	b.buf, b.lineNo = b.buf[:0], b.lineNo[:0]
	if b.lastType != nil {
		b.add(b.lastType, b.lastTypeLine)
	}
	om := b.format == FormatOpenMetrics
	var eof []byte // the "# EOF" line, once read
	eofLine := 0
	prevBlank := false
	for {
		l, err := b.line()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if eof != nil {
			if isBlank(l) {
				continue // trailing blank lines are allowed
			}
			// Data after "# EOF": textparse says so, at the "# EOF" line.
			b.add(eof, eofLine)
			b.add(l, b.n)
			eof = nil
			break
		}
		if l[0] == '#' && isEOFLine(l) {
			if om {
				eof, eofLine = append([]byte(nil), l...), b.n
				continue
			}
			if b.auto && bytes.Equal(l, []byte("# EOF\n")) {
				// DetectFormat would have said OpenMetrics (an "# EOF"
				// with data after it); that data is the error.
				return nil, nil, &PosError{File: b.name, Line: b.n, Col: 1, Msg: "unexpected data after # EOF"}
			}
		}
		blank := isBlank(l)
		switch {
		case blank:
		case l[0] == '#':
			if bytes.HasPrefix(l, []byte("# TYPE ")) {
				b.lastType, b.lastTypeLine = append(b.lastType[:0], l...), b.n
				if b.lastType[len(b.lastType)-1] != '\n' {
					b.lastType = append(b.lastType, '\n')
				}
			}
		case len(b.keep) > 0 && !prevBlank:
			// After a blank line the next line stays: OpenMetrics errors
			// at a blank line name the next non-blank one.
			if t, ok := sampleTime(l, b.format); ok && !keeps(b.keep, t) {
				b.skipped++
				b.minT, b.maxT = min(b.minT, t), max(b.maxT, t)
				continue
			}
		}
		b.add(l, b.n)
		prevBlank = blank
		if len(b.buf) >= blockSize && b.cut(l) {
			// More may follow: end the block here.
			if om {
				b.buf = append(b.buf, eofMarker...)
				b.buf = append(b.buf, '\n')
			}
			b.lineNo = append(b.lineNo, b.n+1, b.n+2)
			return b.buf, b.lineNo, nil
		}
	}
	b.done = true
	if eof != nil {
		b.add([]byte("# EOF\n"), eofLine)
	} else if !om && len(b.buf) > 0 && b.buf[len(b.buf)-1] != '\n' {
		// As NewTextParser: the classic parser wants a final newline.
		b.buf = append(b.buf, '\n')
	}
	b.lineNo = append(b.lineNo, b.n+1)
	if len(b.buf) > 0 && b.buf[len(b.buf)-1] != '\n' {
		// The last line had no newline: the line after it is itself.
		b.lineNo[len(b.lineNo)-1] = b.n
	}
	return b.buf, b.lineNo, nil
}

// cut reports whether a block may end after line l: textparse must read
// the same there as in the whole input, so l must be a plain sample line
// (sampleTime reads it: textparse stops at its newline) and the next line
// must start an entry (not blank: an OpenMetrics error at a blank line
// names the next non-blank one, and the classic lexer takes a run of
// newlines as one token).
func (b *blockReader) cut(l []byte) bool {
	if l[0] == '#' || l[len(l)-1] != '\n' {
		return false
	}
	if _, ok := sampleTime(l, b.format); !ok {
		return false
	}
	next, err := b.r.Peek(1)
	return err == nil && (next[0] == '#' || isNameChar(next[0], true))
}

func isBlank(l []byte) bool {
	return len(bytes.TrimLeft(l, " \t\r\n")) == 0
}

// isEOFLine reports whether l is "# EOF" (blanks after it allowed).
func isEOFLine(l []byte) bool {
	return bytes.Equal(bytes.TrimRight(l, " \t\r\n"), eofMarker)
}

// sampleTime reads the timestamp of a plain sample line (name, labels,
// value, timestamp, one space apart) without textparse, in milliseconds.
// It says ok only for lines textparse would read as exactly that, with a
// plausible timestamp (checkTimestamp), so dropping the line loses no
// error; anything else (exemplars, escapes other than \\ \" \n, odd
// spacing, UTF-8 names, no timestamp) is left to textparse.
func sampleTime(l []byte, f Format) (int64, bool) {
	if n := len(l); n > 0 && l[n-1] == '\n' {
		l = l[:n-1]
	}
	i := 0
	// Metric name.
	for i < len(l) && isNameChar(l[i], i == 0) {
		i++
	}
	if i == 0 || i == len(l) {
		return 0, false
	}
	if l[i] == '{' {
		i++
		if i < len(l) && l[i] == '}' {
			return 0, false // textparse allows it; not worth the check
		}
		for {
			j := i
			for i < len(l) && isLabelChar(l[i], i == j) {
				i++
			}
			if i == j || i+1 >= len(l) || l[i] != '=' || l[i+1] != '"' {
				return 0, false
			}
			i += 2
			for {
				if i >= len(l) {
					return 0, false
				}
				c := l[i]
				if c == '"' {
					break
				}
				if c == '\\' {
					if i+1 >= len(l) || (l[i+1] != '\\' && l[i+1] != '"' && l[i+1] != 'n') {
						return 0, false
					}
					i++
				} else if c < 0x20 || c >= 0x80 {
					return 0, false
				}
				i++
			}
			i++ // closing quote
			if i >= len(l) {
				return 0, false
			}
			if l[i] == '}' {
				i++
				break
			}
			if l[i] != ',' {
				return 0, false
			}
			i++
		}
	}
	if i >= len(l) || l[i] != ' ' {
		return 0, false
	}
	i++
	sp := bytes.IndexByte(l[i:], ' ')
	if sp <= 0 {
		return 0, false // no timestamp: textparse and ReadMetrics say so
	}
	val, ts := l[i:i+sp], l[i+sp+1:]
	if !isPlainFloat(val) {
		return 0, false
	}
	var t int64
	switch f {
	case FormatOpenMetrics:
		if len(ts) == 0 || len(ts) > 20 {
			return 0, false
		}
		dots := 0
		for _, c := range ts {
			if c == '.' {
				dots++
			} else if c < '0' || c > '9' {
				return 0, false
			}
		}
		if dots > 1 || ts[0] == '.' || ts[len(ts)-1] == '.' {
			return 0, false
		}
		if dots == 0 && len(ts) <= 12 {
			// Whole seconds: exactly what textparse's float gives.
			for _, c := range ts {
				t = t*10 + int64(c-'0')
			}
			t *= 1000
		} else {
			s, err := strconv.ParseFloat(string(ts), 64)
			if err != nil {
				return 0, false
			}
			t = int64(s * 1000) // as textparse's OpenMetrics parser
		}
		if t >= millisLikeMin {
			return 0, false
		}
	default:
		if len(ts) == 0 || len(ts) > 18 {
			return 0, false
		}
		for _, c := range ts {
			if c < '0' || c > '9' {
				return 0, false
			}
			t = t*10 + int64(c-'0')
		}
		if t >= secondsLikeMin && t < secondsLikeMax {
			return 0, false
		}
	}
	return t, true
}

func isNameChar(c byte, first bool) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
}

func isLabelChar(c byte, first bool) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
}

// isPlainFloat reports whether v is a float both textparse parsers read
// (strconv.ParseFloat, no hex, no underscores): NaN, ±Inf or a decimal
// number, [+-]digits[.digits][e[+-]digits] with a digit in the mantissa.
func isPlainFloat(v []byte) bool {
	switch string(v) {
	case "NaN", "+Inf", "-Inf":
		return true
	}
	i := 0
	if i < len(v) && (v[i] == '+' || v[i] == '-') {
		i++
	}
	digits := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
		digits++
	}
	if i < len(v) && v[i] == '.' {
		i++
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		exp := 0
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
			exp++
		}
		if exp == 0 {
			return false
		}
	}
	return i == len(v)
}

// detectReader detects the format of r as DetectFormat would and returns
// a reader that yields r's whole content.
func detectReader(r io.Reader) (Format, io.Reader, error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		f, err := detectSeeker(rs)
		return f, rs, err
	}
	head := make([]byte, headSize+1)
	n, err := io.ReadFull(r, head)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		head = head[:n]
		return DetectFormat(head), bytes.NewReader(head), nil
	case err != nil:
		return 0, nil, fmt.Errorf("read: %w", err)
	}
	return 0, nil, fmt.Errorf("cannot tell OpenMetrics from Prometheus text in a stream over %d bytes: give the format", headSize)
}

// detectSeeker reads the start and the end of rs (then seeks back) to
// detect the format: OpenMetrics when the text starts with or ends with
// "# EOF". An "# EOF" in the middle, which DetectFormat also counts, is
// found while reading (blockReader).
func detectSeeker(rs io.ReadSeeker) (Format, error) {
	start, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	end, err := rs.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	defer rs.Seek(start, io.SeekStart)
	readAt := func(off int64, p []byte) ([]byte, error) {
		if _, err := rs.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
		n, err := io.ReadFull(rs, p)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return p[:n], nil
	}
	head, err := readAt(start, make([]byte, len(eofMarker)))
	if err != nil {
		return 0, err
	}
	if bytes.Equal(head, eofMarker) {
		return FormatOpenMetrics, nil
	}
	// Walk back over trailing blanks to the last 6 bytes before them.
	const chunk = 4096
	for off := end; off > start; {
		from := max(start, off-chunk)
		b, err := readAt(from, make([]byte, off-from))
		if err != nil {
			return 0, err
		}
		tail := bytes.TrimRight(b, " \t\r\n")
		if len(tail) == 0 {
			off = from
			continue
		}
		at := from // file offset of tail[0]
		if len(tail) <= len(eofMarker) && from > start {
			at = max(start, from-8)
			more, err := readAt(at, make([]byte, from-at))
			if err != nil {
				return 0, err
			}
			tail = append(more, tail...)
		}
		if bytes.HasSuffix(tail, eofMarker) {
			i := len(tail) - len(eofMarker)
			if (i == 0 && at == start) || (i > 0 && tail[i-1] == '\n') {
				return FormatOpenMetrics, nil
			}
		}
		break
	}
	return FormatPrometheusText, nil
}
