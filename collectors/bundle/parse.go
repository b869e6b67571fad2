package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// Format is a text exposition format.
type Format int

// Formats. FormatAuto picks one from the content (see DetectFormat).
const (
	FormatAuto Format = iota
	FormatOpenMetrics
	FormatPrometheusText
)

// String returns the format's name.
func (f Format) String() string {
	switch f {
	case FormatAuto:
		return "auto"
	case FormatOpenMetrics:
		return "openmetrics"
	case FormatPrometheusText:
		return "prometheus-text"
	default:
		return fmt.Sprintf("Format(%d)", int(f))
	}
}

// ContentType returns the media type textparse uses for the format.
func (f Format) ContentType() string {
	if f == FormatOpenMetrics {
		return "application/openmetrics-text; version=1.0.0"
	}
	return "text/plain; version=0.0.4"
}

// parser returns Prometheus's parser of f for b: what textparse.New
// returns for f's ContentType with no options, called directly so that
// the protobuf and OpenMetrics 2.0 parsers, which textparse.New can also
// return, are not linked.
func (f Format) parser(b []byte, st *labels.SymbolTable) textparse.Parser {
	if f == FormatOpenMetrics {
		return textparse.NewOpenMetricsParser(b, st)
	}
	return textparse.NewPromParser(b, st, false)
}

var eofMarker = []byte("# EOF")

// DetectFormat tells OpenMetrics from classic Prometheus text by content:
// OpenMetrics ends with a "# EOF" line (trailing blank lines allowed), or has
// one followed by stray data (which the parser then reports); anything else
// is classic Prometheus text. The two differ in timestamp units (OpenMetrics:
// seconds, may be fractional; classic text: integer milliseconds), so the
// choice matters; a classic-text file that looks like OpenMetrics (# UNIT,
// TYPE unknown) without "# EOF" fails with a hint.
func DetectFormat(data []byte) Format {
	trimmed := bytes.TrimRight(data, " \t\r\n")
	if bytes.HasSuffix(trimmed, eofMarker) {
		if i := len(trimmed) - len(eofMarker); i == 0 || trimmed[i-1] == '\n' {
			return FormatOpenMetrics
		}
	}
	if bytes.HasPrefix(data, eofMarker) || bytes.Contains(data, []byte("\n# EOF\n")) {
		return FormatOpenMetrics
	}
	return FormatPrometheusText
}

// Timestamp plausibility bounds, in milliseconds: classic text with a value
// in [1e9, 1e11) is almost surely seconds (2001..5138 as seconds, Jan 1970
// as milliseconds); OpenMetrics with a value past 1e14 ms was almost surely
// written in milliseconds.
const (
	secondsLikeMin = 1e9
	secondsLikeMax = 1e11
	millisLikeMin  = 1e14
	minTimestampMs = -62135596800000 // 0001-01-01T00:00:00Z
	maxTimestampMs = 253402300799999 // 9999-12-31T23:59:59.999Z
)

// TextParser reads float samples from Prometheus text or OpenMetrics with
// Prometheus's own parser (model/textparse), tracking the line and column of
// each entry so errors read "name:line:col: message". Classic histograms and
// summaries come out as their plain series; native histograms are rejected.
//
// A parser made by NewTextParser parses one byte slice; one made by
// NewStreamParser reads its input line by line, a block of lines at a time
// (see blockReader), so memory does not grow with the input.
type TextParser struct {
	name   string
	data   []byte
	format Format
	p      textparse.Parser
	syms   *labels.SymbolTable

	// src feeds the blocks of a stream parser; nil for a byte slice.
	src *blockReader
	// fast holds the samples of a block read without textparse
	// (blockReader.fillFast) not yet returned, cur the current one.
	fast  []fastSample
	cur   *fastSample
	fastT int64
	// lineNo is the input line of each line of data (the block), with one
	// more entry for the line after it; nil when data is the whole input.
	lineNo []int

	// Position bookkeeping: lines counts the newlines before cursor (a line
	// start) in data; next is the offset just past the current entry's line.
	cursor, lines int
	line, col     int
	next          int

	series []byte
	ts     *int64
	val    float64

	// nul is the offset of the first NUL byte in data, or -1, and nulLine
	// the start of its line. textparse's lexers take a NUL for the end of
	// the input, the classic one reads past it inside a comment, and a
	// stream replays a type line before it, so a NUL would end or shift the
	// parse differently whole and in blocks. One rule for both: textparse
	// reads only the lines before the NUL's, and the NUL is the error at
	// their end (unless one of them has an error of its own).
	nul, nulLine int
}

// NewTextParser returns a parser for data; name prefixes every error (a file
// name or a URL). FormatAuto detects the format with DetectFormat.
func NewTextParser(name string, data []byte, format Format) (*TextParser, error) {
	if format == FormatAuto {
		format = DetectFormat(data)
	}
	switch format {
	case FormatOpenMetrics:
		// Tolerate trailing blank lines after "# EOF": the parser does not.
		if t := bytes.TrimRight(data, " \t\r\n"); bytes.HasSuffix(t, eofMarker) {
			if len(t) < len(data) && data[len(t)] == '\n' {
				data = data[:len(t)+1]
			} else {
				data = append(t[:len(t):len(t)], '\n')
			}
		}
	case FormatPrometheusText:
		// The classic parser copies input lacking a final newline; add it
		// here so the entries it returns stay inside data.
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(data[:len(data):len(data)], '\n')
		}
	default:
		return nil, fmt.Errorf("%s: unknown format %s", name, format)
	}
	tp := &TextParser{name: name, format: format, syms: labels.NewSymbolTable()}
	if err := tp.reset(data, nil); err != nil {
		return nil, err
	}
	return tp, nil
}

// reset starts parsing block data, whose lines are lineNo (nil: data is the
// whole input).
func (p *TextParser) reset(data []byte, lineNo []int) error {
	text := data
	p.nul, p.nulLine = bytes.IndexByte(data, 0), len(data)
	if p.nul >= 0 {
		p.nulLine = bytes.LastIndexByte(data[:p.nul], '\n') + 1
		// Lines that end in a newline; none is nil, not data[:0]: the
		// classic parser appends a newline to empty input, which would
		// overwrite the NUL. (mark reads offsets from data's capacity.)
		text = data[:p.nulLine]
		if p.nulLine == 0 {
			text = nil
		}
	}
	tp := p.format.parser(text, p.syms)
	p.p, p.data, p.lineNo = tp, data, lineNo
	p.cursor, p.lines, p.next = 0, 0, 0
	return nil
}

// nulError positions an error at the NUL byte before which textparse
// stopped.
func (p *TextParser) nulError() error {
	p.setLine(p.nulLine)
	p.col = p.nul - p.nulLine + 1
	return p.Errorf("NUL byte: the text formats do not allow one")
}

// Format returns the format being parsed.
func (p *TextParser) Format() Format { return p.format }

// Next advances to the next float sample. It returns false at the end of the
// input, and a positioned error for malformed input.
func (p *TextParser) Next() (bool, error) {
	p.cur = nil
	for {
		if p.src != nil && p.src.inFast {
			if p.nextFast() {
				return true, nil
			}
			if err := p.nextBlock(); err != nil {
				return false, err
			}
			continue
		}
		et, err := p.p.Next()
		if errors.Is(err, io.EOF) {
			if p.nul >= 0 {
				return false, p.nulError()
			}
			if p.src == nil || p.src.done {
				return false, nil
			}
			if err := p.nextBlock(); err != nil {
				return false, err
			}
			continue
		}
		if err != nil {
			return false, p.parseError(err)
		}
		var anchor []byte
		switch et {
		case textparse.EntrySeries:
			p.series, p.ts, p.val = p.p.Series()
			p.mark(p.series)
			if p.src != nil {
				p.src.learn(p.series)
			}
			if p.ts != nil {
				if err := p.checkTimestamp(*p.ts); err != nil {
					return false, err
				}
			}
			return true, nil
		case textparse.EntryHistogram:
			s, _, _, _ := p.p.Histogram()
			p.mark(s)
			return false, p.Errorf("native histograms are not supported (classic histograms only)")
		case textparse.EntryType:
			anchor, _ = p.p.Type()
		case textparse.EntryHelp:
			anchor, _ = p.p.Help()
		case textparse.EntryUnit:
			anchor, _ = p.p.Unit()
		case textparse.EntryComment:
			anchor = p.p.Comment()
		}
		p.mark(anchor)
	}
}

// Series returns the raw series text (name and labels as written) of the
// current sample; it is valid until the next call to Next and is a good
// cache key for the parsed labels.
func (p *TextParser) Series() []byte { return p.series }

// Labels writes the current sample's labels (with __name__) into l.
func (p *TextParser) Labels(l *labels.Labels) {
	if p.cur != nil {
		p.fastLabels(l)
		return
	}
	p.p.Labels(l)
}

// Timestamp returns the current sample's timestamp in milliseconds and
// whether it had one.
func (p *TextParser) Timestamp() (int64, bool) {
	if p.ts == nil {
		return 0, false
	}
	return *p.ts, true
}

// Value returns the current sample's value.
func (p *TextParser) Value() float64 { return p.val }

// Position returns the 1-based line and column of the current entry.
func (p *TextParser) Position() (line, col int) { return p.line, p.col }

// Errorf returns an error positioned at the current entry.
func (p *TextParser) Errorf(format string, args ...any) error {
	return &PosError{File: p.name, Line: p.line, Col: p.col, Msg: fmt.Sprintf(format, args...)}
}

func (p *TextParser) checkTimestamp(ts int64) error {
	switch p.format {
	case FormatPrometheusText:
		if ts >= secondsLikeMin && ts < secondsLikeMax {
			return p.Errorf("timestamp %d looks like seconds: classic Prometheus text uses milliseconds (OpenMetrics, with seconds, must end with \"# EOF\")", ts)
		}
	case FormatOpenMetrics:
		if ts >= millisLikeMin {
			return p.Errorf("timestamp %g s looks like milliseconds: OpenMetrics timestamps are seconds", float64(ts)/1000)
		}
	}
	// textparse turns an OpenMetrics timestamp past int64 milliseconds
	// (1e300) into math.MinInt64, which the store called "too old" at
	// year -292275055: the years 1..9999 are the ones a bundle can mean.
	if ts < minTimestampMs || ts > maxTimestampMs {
		return p.Errorf("timestamp out of range: a bundle's samples lie within the years 1 to 9999")
	}
	return nil
}

// mark records that the entry containing anchor (a sub-slice of data) was
// read. Without a usable anchor the entry is taken to be the next non-blank
// line.
func (p *TextParser) mark(anchor []byte) {
	off := -1
	if anchor != nil {
		if o := cap(p.data) - cap(anchor); o >= p.next && o <= len(p.data) {
			off = o
		}
	}
	if off < 0 {
		off = p.skipBlank(p.next)
	}
	start := bytes.LastIndexByte(p.data[:off], '\n') + 1
	p.setLine(start)
	p.col = 1 // entries are whole lines
	end := bytes.IndexByte(p.data[start:], '\n')
	if end < 0 {
		p.next = len(p.data)
	} else {
		p.next = start + end + 1
	}
}

// setLine moves the line counter forward to the line starting at start.
func (p *TextParser) setLine(start int) {
	if start >= p.cursor {
		p.lines += bytes.Count(p.data[p.cursor:start], []byte{'\n'})
	} else {
		p.lines = bytes.Count(p.data[:start], []byte{'\n'})
	}
	p.cursor = start
	p.line = p.lineAt(p.lines)
}

// lineAt returns the input line of line i (0-based) of the block.
func (p *TextParser) lineAt(i int) int {
	switch {
	case p.lineNo == nil:
		return i + 1
	case i < len(p.lineNo):
		return p.lineNo[i]
	default:
		return p.lineNo[len(p.lineNo)-1] + i - (len(p.lineNo) - 1)
	}
}

// skipBlank returns the offset of the first line at or after off that is
// not blank (the classic parser skips blank lines).
func (p *TextParser) skipBlank(off int) int {
	for off < len(p.data) {
		end := bytes.IndexByte(p.data[off:], '\n')
		if end < 0 {
			return off
		}
		if len(bytes.TrimSpace(p.data[off:off+end])) != 0 {
			return off
		}
		off += end + 1
	}
	return min(off, len(p.data))
}

// parseError positions a textparse error. The failing entry starts at the
// first non-blank line after the last good entry; the column comes from the
// text textparse quotes ("got X while parsing: Y") when there is one.
func (p *TextParser) parseError(err error) error {
	start := p.skipBlank(p.next)
	if p.nul >= 0 && start >= p.nulLine {
		// textparse ran out of lines at the NUL's (OpenMetrics: no "# EOF").
		return p.nulError()
	}
	if start >= len(p.data) && start > 0 {
		// Error at the end of input: point just past the last line.
		start = len(p.data)
	}
	err = p.lineError(start, err)
	p.setLine(start)
	p.col = 1
	msg := firstLineQuoted(firstLineQuoted(err.Error(), ", got "), " while parsing: ")
	line := p.data[start:]
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i+1]
	}
	if prefix, ok := quotedAfter(msg, " while parsing: "); ok && bytes.HasPrefix(line, []byte(strings.TrimSuffix(prefix, "\n"))) {
		if got, ok := quotedAfter(msg, ", got "); ok && len(got) <= len(prefix) {
			// Point at the token itself, not the blanks before it.
			if g := strings.TrimLeft(got, " \t"); g != "" {
				got = g
			}
			p.col = len(prefix) - len(got) + 1
		} else if i := strings.LastIndexAny(strings.TrimRight(prefix, " \t\n"), " \t"); i >= 0 {
			p.col = i + 2
		}
	}
	if p.format == FormatPrometheusText && p.looksOpenMetrics() {
		msg += ` (this looks like OpenMetrics: it must end with "# EOF")`
	}
	return &PosError{File: p.name, Line: p.line, Col: p.col, Msg: msg, Err: err}
}

// lineError returns the error textparse gives for the line at start alone
// when err is about an entry it read past that line's end: a quote left
// open reads on across newlines (the text formats allow none inside one),
// while a stream cuts its blocks at lines. Otherwise err.
func (p *TextParser) lineError(start int, err error) error {
	s, ok := quotedAfter(err.Error(), " while parsing: ")
	if i := strings.IndexByte(s, '\n'); !ok || i < 0 || i == len(s)-1 {
		return err
	}
	end := bytes.IndexByte(p.data[start:], '\n')
	if end < 0 {
		return err
	}
	line := append([]byte(nil), p.data[start:start+end+1]...)
	if p.format == FormatOpenMetrics {
		line = append(append(line, eofMarker...), '\n')
	}
	tp := p.format.parser(line, labels.NewSymbolTable())
	var lerr error
	for lerr == nil {
		_, lerr = tp.Next()
	}
	if errors.Is(lerr, io.EOF) {
		return err
	}
	return lerr
}

// firstLineQuoted cuts the text quoted after marker in msg after its first
// newline. Inside an unclosed label value textparse quotes every line up to
// the end of what it was given: the whole input, or only a stream's block.
func firstLineQuoted(msg, marker string) string {
	s, ok := quotedAfter(msg, marker)
	i := strings.IndexByte(s, '\n')
	if !ok || i < 0 || i == len(s)-1 {
		return msg
	}
	at := quotedAt(msg, marker)
	q, _ := strconv.QuotedPrefix(msg[at:])
	return msg[:at] + strconv.Quote(s[:i+1]) + msg[at+len(q):]
}

// quotedAt returns where the quoted text after marker starts in msg: the
// last marker for " while parsing: ", the first for ", got ".
func quotedAt(msg, marker string) int {
	i := strings.LastIndex(msg, marker)
	if marker == ", got " {
		i = strings.Index(msg, marker)
	}
	if i < 0 {
		return -1
	}
	return i + len(marker)
}

// quotedAfter returns the Go-quoted string that follows marker in msg
// (quotedAt says which occurrence), unquoted.
func quotedAfter(msg, marker string) (string, bool) {
	i := quotedAt(msg, marker)
	if i < 0 {
		return "", false
	}
	q, err := strconv.QuotedPrefix(msg[i:])
	if err != nil {
		return "", false
	}
	s, err := strconv.Unquote(q)
	if err != nil {
		return "", false
	}
	return s, true
}

// looksOpenMetrics reports whether the input has a mark of OpenMetrics.
func (p *TextParser) looksOpenMetrics() bool {
	if p.src != nil {
		return p.src.looksOpenMetrics()
	}
	return looksOpenMetrics(p.data)
}

func looksOpenMetrics(data []byte) bool {
	for _, s := range []string{"# UNIT ", " unknown\n", " stateset\n", " info\n", " gaugehistogram\n"} {
		if bytes.Contains(data, []byte(s)) {
			return true
		}
	}
	return false
}

// PosError is an error at a place in a file: it prints as
// "file:line:col: message".
type PosError struct {
	File      string
	Line, Col int
	Msg       string
	// Err is the underlying error, if any.
	Err error
}

// Error implements error.
func (e *PosError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// Unwrap returns the underlying error.
func (e *PosError) Unwrap() error { return e.Err }
