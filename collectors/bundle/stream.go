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
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/model/value"
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
		name:    name,
		r:       bufio.NewReaderSize(r, 64<<10),
		format:  format,
		auto:    auto,
		keep:    spans(o.Keep),
		known:   make(map[string]struct{}),
		inBlock: make(map[string]struct{}),
		minT:    math.MaxInt64,
		maxT:    math.MinInt64,
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
	if p.src.inFast {
		p.data, p.lineNo, p.fast, p.nul = data, nil, p.src.fast, -1
		return nil
	}
	p.fast = nil
	return p.reset(data, lineNo)
}

// nextFast moves to the next sample of a block read without textparse
// (blockReader.fillFast), and reports false at its end.
func (p *TextParser) nextFast() bool {
	if len(p.fast) == 0 {
		return false
	}
	s := &p.fast[0]
	p.cur, p.fast = s, p.fast[1:]
	p.series = p.data[s.start:s.seriesEnd]
	p.fastT = s.t
	p.ts, p.val = &p.fastT, s.val
	p.line, p.col = s.line, 1
	return true
}

// fastLabels writes the labels of the current sample read without
// textparse: textparse's, from its line after the type line before it.
func (p *TextParser) fastLabels(l *labels.Labels) {
	data := append(append([]byte(nil), p.src.lastType...), p.data[p.cur.start:p.cur.end]...)
	if p.format == FormatOpenMetrics {
		data = append(append(data, eofMarker...), '\n')
	}
	tp := p.format.parser(data, p.syms)
	var err error
	for err == nil {
		var et textparse.Entry
		if et, err = tp.Next(); err == nil && et == textparse.EntrySeries {
			tp.Labels(l)
			return
		}
	}
	*l = labels.EmptyLabels() // not reached: textparse read this series before
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

	// known holds the series texts textparse has returned (learn): a later
	// sample line of one of them is read here from its end (sampleLine,
	// fastValue), not lexed again, in a block of such lines (fast, when
	// inFast says the block is one). Only a series' first line is lexed.
	known  map[string]struct{}
	fast   []fastSample
	inFast bool
	// inBlock holds the series texts of the textparse block being read
	// that are not yet known: a second line of one ends the block, so that
	// the rest of the series skips textparse.
	inBlock map[string]struct{}
	// held is a line read that starts the next block (unread).
	held []byte

	// omLike says a line read so far looks like OpenMetrics (classic text
	// only; see looksOpenMetrics).
	omLike bool
}

// fastSample is a sample line read without textparse: its place in the
// block, its series text's end, its value and timestamp, its input line.
type fastSample struct {
	start, seriesEnd, end int
	val                   float64
	t                     int64
	line                  int
}

// learn records a series text textparse returned.
func (b *blockReader) learn(series []byte) {
	if _, ok := b.known[string(series)]; !ok {
		b.known[string(series)] = struct{}{}
	}
}

// fastValue reports whether sample line l of a known series (sampleLine:
// value text val, timestamp t) may skip textparse, and its value:
// textparse has read its series text before, so it reads this line as the
// same series with this value and timestamp (the type line before it
// changes only the labels, which textparse still gives: fastLabels); the
// line ends in a newline (textparse stops there), the value parses and t
// passes checkTimestamp.
func fastValue(l []byte, val []byte, t int64) (float64, bool) {
	if l[len(l)-1] != '\n' || t < minTimestampMs || t > maxTimestampMs {
		return 0, false
	}
	return plainFloat(val)
}

// sampleLine reads sample line l as plainSample does (ok), and says
// whether textparse read its series text before (known): from the line's
// end for such a series (knownTail), else from its start.
func (b *blockReader) sampleLine(l []byte) (seriesEnd int, val []byte, t int64, ok, known bool) {
	if seriesEnd, val, t, ok = knownTail(l, b.format); ok {
		if _, known = b.known[string(l[:seriesEnd])]; known {
			return seriesEnd, val, t, true, true
		}
	}
	// A plain line's series text is the one knownTail found: not known.
	seriesEnd, val, t, ok = plainSample(l, b.format)
	return seriesEnd, val, t, ok, false
}

// line returns the next line with its newline (none at the end of input),
// or io.EOF.
func (b *blockReader) line() ([]byte, error) {
	if l := b.held; l != nil {
		b.held = nil // counted when it was first read
		return l, nil
	}
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
// block has lines: the line after it). A block of known series' plain
// sample lines (inFast) is read here (fillFast); any other goes to
// textparse, and ends before such a line where a block may end (cut).
func (b *blockReader) fill() ([]byte, []int, error) {
	b.buf, b.lineNo, b.fast, b.inFast = b.buf[:0], b.lineNo[:0], b.fast[:0], false
	l, s, fast, err := b.nextKept()
	switch {
	case err != nil:
		return nil, nil, err
	case fast:
		return b.fillFast(l, s)
	}
	b.held = l // nil at the end of input
	clear(b.inBlock)
	if b.lastType != nil {
		b.add(b.lastType, b.lastTypeLine)
	}
	om := b.format == FormatOpenMetrics
	var eof []byte // the "# EOF" line, once read
	eofLine := 0
	prevBlank := false
	lastPlain := false // the last line added may end a block (cut)
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
		plain := false
		switch {
		case blank:
		case l[0] == '#':
			if bytes.HasPrefix(l, []byte("# TYPE ")) {
				b.lastType, b.lastTypeLine = append(b.lastType[:0], l...), b.n
				if b.lastType[len(b.lastType)-1] != '\n' {
					b.lastType = append(b.lastType, '\n')
				}
			}
		case !prevBlank:
			// After a blank line the next line stays: OpenMetrics errors
			// at a blank line name the next non-blank one.
			end, val, t, ok, known := b.sampleLine(l)
			if ok && len(b.keep) > 0 && !keeps(b.keep, t) {
				b.skip(t)
				continue
			}
			if ok && lastPlain {
				_, again := b.inBlock[string(l[:end])]
				if _, fast := fastValue(l, val, t); (known && fast) || again {
					// The next block starts here: textparse will have
					// read this series (again), so it may skip it.
					b.held = l
					return b.endBlock(b.n), b.lineNo, nil
				}
			}
			if ok && !known {
				b.inBlock[string(l[:end])] = struct{}{}
			}
			plain = ok && l[len(l)-1] == '\n'
		}
		b.add(l, b.n)
		prevBlank, lastPlain = blank, plain
		if len(b.buf) >= blockSize && b.cut(l) {
			// More may follow: end the block here.
			return b.endBlock(b.n + 1), b.lineNo, nil
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

// endBlock ends a textparse block that more blocks follow, next being the
// number of the input line after it: an OpenMetrics block ends in "# EOF"
// of its own.
func (b *blockReader) endBlock(next int) []byte {
	if b.format == FormatOpenMetrics {
		b.buf = append(b.buf, eofMarker...)
		b.buf = append(b.buf, '\n')
	}
	b.lineNo = append(b.lineNo, next, next+1)
	return b.buf
}

// skip counts a sample line at t dropped for lying outside the windows.
func (b *blockReader) skip(t int64) {
	b.skipped++
	b.minT, b.maxT = min(b.minT, t), max(b.maxT, t)
}

// nextKept returns the next line not dropped for lying outside the kept
// windows (nil at the end of input) and whether it may skip textparse
// (fastValue), with its sample when it may.
func (b *blockReader) nextKept() (l []byte, s fastSample, fast bool, err error) {
	for {
		l, err = b.line()
		if errors.Is(err, io.EOF) {
			return nil, s, false, nil
		}
		if err != nil {
			return nil, s, false, err
		}
		end, val, t, ok, known := b.sampleLine(l)
		if ok && len(b.keep) > 0 && !keeps(b.keep, t) {
			b.skip(t)
			continue
		}
		if !known {
			return l, s, false, nil
		}
		v, fast := fastValue(l, val, t)
		return l, fastSample{seriesEnd: end, val: v, t: t, line: b.n}, fast, nil
	}
}

// fillFast reads a block of sample lines that may skip textparse
// (nextKept), starting with l, up to the first other line, which it holds
// for the next block.
func (b *blockReader) fillFast(l []byte, s fastSample) ([]byte, []int, error) {
	b.inFast = true
	for {
		s.start = len(b.buf)
		s.seriesEnd += s.start
		b.buf = append(b.buf, l...)
		s.end = len(b.buf)
		b.fast = append(b.fast, s)
		if len(b.buf) >= blockSize {
			break
		}
		var fast bool
		var err error
		if l, s, fast, err = b.nextKept(); err != nil {
			return nil, nil, err
		}
		if !fast {
			b.held = l // nil at the end of input
			break
		}
	}
	return b.buf, nil, nil
}

// plainFloat returns the value textparse gives for v, which isPlainFloat
// accepts: strconv.ParseFloat's, NaN made Prometheus's normal NaN; not ok
// where textparse fails (out of range). Small integers, most values in a
// bundle, are converted without ParseFloat.
func plainFloat(v []byte) (float64, bool) {
	if len(v) <= 15 && isDigits(v) {
		n := int64(0)
		for _, c := range v {
			n = n*10 + int64(c-'0')
		}
		return float64(n), true // exact: below 2^53
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return 0, false
	}
	if math.IsNaN(f) {
		f = math.Float64frombits(value.NormalNaN)
	}
	return f, true
}

func isDigits(v []byte) bool {
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(v) > 0
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
	_, _, t, ok := plainSample(l, f)
	return t, ok
}

// plainSample is sampleTime also returning where the series text (name and
// labels, as textparse's Series returns it) ends and the value's text.
func plainSample(l []byte, f Format) (seriesEnd int, val []byte, t int64, ok bool) {
	if n := len(l); n > 0 && l[n-1] == '\n' {
		l = l[:n-1]
	}
	i := 0
	// Metric name.
	for i < len(l) && isNameChar(l[i], i == 0) {
		i++
	}
	if i == 0 || i == len(l) {
		return 0, nil, 0, false
	}
	if l[i] == '{' {
		i++
		if i < len(l) && l[i] == '}' {
			return 0, nil, 0, false // textparse allows it; not worth the check
		}
		for {
			j := i
			for i < len(l) && isLabelChar(l[i], i == j) {
				i++
			}
			if i == j || i+1 >= len(l) || l[i] != '=' || l[i+1] != '"' {
				return 0, nil, 0, false
			}
			i += 2
			for {
				if i >= len(l) {
					return 0, nil, 0, false
				}
				c := l[i]
				if c == '"' {
					break
				}
				if c == '\\' {
					if i+1 >= len(l) || (l[i+1] != '\\' && l[i+1] != '"' && l[i+1] != 'n') {
						return 0, nil, 0, false
					}
					i++
				} else if c < 0x20 || c >= 0x80 {
					return 0, nil, 0, false
				}
				i++
			}
			i++ // closing quote
			if i >= len(l) {
				return 0, nil, 0, false
			}
			if l[i] == '}' {
				i++
				break
			}
			if l[i] != ',' {
				return 0, nil, 0, false
			}
			i++
		}
	}
	if i >= len(l) || l[i] != ' ' {
		return 0, nil, 0, false
	}
	i++
	sp := bytes.IndexByte(l[i:], ' ')
	if sp <= 0 {
		return 0, nil, 0, false // no timestamp: textparse and ReadMetrics say so
	}
	seriesEnd = i - 1
	val, ts := l[i:i+sp], l[i+sp+1:]
	if !isPlainFloat(val) {
		return 0, nil, 0, false
	}
	t, ok = plainTimestamp(ts, f)
	return seriesEnd, val, t, ok
}

// knownTail reads a sample line from its end: the timestamp after the last
// space, the value before it (isPlainFloat) and, before that space, what
// would be the series text. When that text is one textparse read before,
// textparse reads the whole line as plainSample does, without the scan of
// its labels.
func knownTail(l []byte, f Format) (seriesEnd int, val []byte, t int64, ok bool) {
	if n := len(l); n > 0 && l[n-1] == '\n' {
		l = l[:n-1]
	}
	sp2 := bytes.LastIndexByte(l, ' ')
	if sp2 <= 0 {
		return 0, nil, 0, false
	}
	sp1 := bytes.LastIndexByte(l[:sp2], ' ')
	if sp1 <= 0 {
		return 0, nil, 0, false
	}
	val = l[sp1+1 : sp2]
	if !isPlainFloat(val) {
		return 0, nil, 0, false
	}
	t, ok = plainTimestamp(l[sp2+1:], f)
	return sp1, val, t, ok
}

// plainTimestamp reads a sample's timestamp in milliseconds where textparse
// reads it exactly so and it is plausible for the format (checkTimestamp).
func plainTimestamp(ts []byte, f Format) (t int64, ok bool) {
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
