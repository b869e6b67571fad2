package store

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// parseCache is the engine's parser with the parsed form of each query
// shape kept: a daemon cycle runs the same few hundred expressions for
// every scope, which differ only in their string literals (the scope's
// label values), and parsing was a sixth of a triage's CPU. A query's
// shape is its text with each plain string literal replaced by a
// placeholder of the same length, so positions (in errors and warnings)
// stay those of the query; its parse is kept once, and each query gets a
// copy with its own values put back. The engine annotates the tree it gets
// (series, offsets), so a kept tree is never handed out. Anything the copy
// does not know (a node type, a literal that is not plain, a value that
// would not parse) is parsed as is. A query without literals is its own
// shape and is kept too: a sidecar's queries have none and were parsed
// again every cycle. A shape's tree is kept only the second time the
// shape is asked: some triage queries hold numbers that change every cycle
// (a range as long as the data seen so far), so their shapes never repeat,
// and keeping each one's tree held thousands of dead trees, the sidecar's
// live heap doubling once an incident opened. Kept shapes not asked for a
// while go (sweep): an incident's triage queries are a few hundred shapes
// a sidecar asks only while the incident is open, and their trees (~0.35
// MB) outlived it. Safe for concurrent use.
type parseCache struct {
	parser.Parser
	mu sync.RWMutex
	// shapes are the trees asked since the last sweep, older those asked
	// only in the period before it; a sweep drops older.
	shapes, older map[string]parser.Expr
	// seenOnce holds the hashes of shapes asked once and not kept.
	seenOnce map[uint64]struct{}
	seed     maphash.Seed
	// now is the clock sweeps follow; nextSweep is when the next is due
	// (unix ns).
	now       func() time.Time
	nextSweep atomic.Int64
}

// shapeSweepPeriod is how often kept shapes not asked since the last
// sweep are dropped: a shape goes 10–20 minutes after it was last asked.
// A daemon asks its detector's and its open incidents' shapes every cycle
// (seconds), so they stay.
const shapeSweepPeriod = 10 * time.Minute

// maxShapes bounds the parses kept in a period (the older period holds at
// most as many): when full the period starts over. A
// fleet's queries have a few hundred shapes; the bound is for queries
// that are not the rulesets' (API users', the detector's triggers).
const maxShapes = 4096

// placeholderMark starts every placeholder: no PromQL string a user or a
// ruleset writes holds a NUL byte (a query holding one is parsed as is).
const placeholderMark = '\x00'

func newParseCache(p parser.Parser) *parseCache {
	return newParseCacheAt(p, time.Now)
}

// newParseCacheAt is newParseCache with the clock its sweeps follow.
func newParseCacheAt(p parser.Parser, now func() time.Time) *parseCache {
	c := &parseCache{Parser: p, shapes: map[string]parser.Expr{}, older: map[string]parser.Expr{},
		seenOnce: map[uint64]struct{}{}, seed: maphash.MakeSeed(), now: now}
	c.nextSweep.Store(now().Add(shapeSweepPeriod).UnixNano())
	return c
}

// sweep drops the shapes not asked in the last full period and forgets
// the shapes seen once, when a sweep is due.
func (c *parseCache) sweep() {
	at := c.now()
	next := c.nextSweep.Load()
	if at.UnixNano() < next || !c.nextSweep.CompareAndSwap(next, at.Add(shapeSweepPeriod).UnixNano()) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.older, c.shapes = c.shapes, make(map[string]parser.Expr, len(c.shapes))
	clear(c.seenOnce)
}

// lookup returns the kept tree of shape; one kept only in the older
// period moves back to the current one.
func (c *parseCache) lookup(shape string) (parser.Expr, bool) {
	c.mu.RLock()
	e, ok := c.shapes[shape]
	old := false
	if !ok {
		_, old = c.older[shape]
	}
	c.mu.RUnlock()
	if ok || !old {
		return e, ok
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok = c.shapes[shape]; ok {
		return e, true
	}
	if e, ok = c.older[shape]; ok {
		delete(c.older, shape)
		c.shapes[shape] = e
	}
	return e, ok
}

// ParseExpr implements parser.Parser.
func (c *parseCache) ParseExpr(input string) (parser.Expr, error) {
	shape, values, ok := queryShape(input)
	if !ok {
		return c.Parser.ParseExpr(input)
	}
	c.sweep()
	kept, found := c.lookup(shape)
	if !found {
		if !c.admit(shape) {
			// First sighting: parsed as is, nothing kept.
			return c.Parser.ParseExpr(input)
		}
		e, err := c.Parser.ParseExpr(shape)
		if err != nil {
			if len(values) == 0 {
				// The shape is the query: this is the parser's own answer.
				return e, err
			}
			return c.Parser.ParseExpr(input)
		}
		c.mu.Lock()
		if len(c.shapes) >= maxShapes {
			clear(c.shapes)
		}
		c.shapes[shape] = e
		c.mu.Unlock()
		kept = e
	}
	cp := treeCopier{values: values, used: make([]bool, len(values))}
	e := cp.expr(kept)
	if !cp.ok {
		return c.Parser.ParseExpr(input)
	}
	for _, u := range cp.used {
		if !u {
			return c.Parser.ParseExpr(input)
		}
	}
	return e, nil
}

// admit reports whether shape was asked before (and forgets that it was):
// only then is its tree kept.
func (c *parseCache) admit(shape string) bool {
	h := maphash.String(c.seed, shape)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seenOnce[h]; ok {
		delete(c.seenOnce, h)
		return true
	}
	if len(c.seenOnce) >= maxShapes {
		clear(c.seenOnce)
	}
	c.seenOnce[h] = struct{}{}
	return false
}

// queryShape returns input with its plain string literals (no escapes,
// at least 3 bytes inside the quotes, valid UTF-8, not the metric name
// label) replaced by placeholders of the same length, and their values in
// order (input itself and no values when it has no such literal); false
// when input cannot be split safely (a NUL byte, a comment, an
// unterminated string).
func queryShape(input string) (string, []string, bool) {
	if strings.IndexByte(input, placeholderMark) >= 0 {
		return "", nil, false
	}
	var b strings.Builder
	var values []string
	last := 0
	for i := 0; i < len(input); i++ {
		q := input[i]
		if q == '#' {
			return "", nil, false
		}
		if q != '"' && q != '\'' && q != '`' {
			continue
		}
		end := strings.IndexByte(input[i+1:], q)
		if end < 0 {
			return "", nil, false
		}
		end += i + 1
		inner := input[i+1 : end]
		if strings.IndexByte(inner, '\\') >= 0 && q != '`' {
			// An escape may hide the closing quote: the literal's end is
			// not known without the lexer.
			return "", nil, false
		}
		plain := len(inner) >= 3 && utf8.ValidString(inner) && !strings.ContainsAny(inner, "\n\\") && inner != labels.MetricName
		if plain && fits(len(values), len(inner)) {
			b.WriteString(input[last : i+1])
			b.WriteString(placeholder(len(values), len(inner)))
			last = end
			values = append(values, inner)
		}
		i = end
	}
	if len(values) == 0 {
		return input, nil, true
	}
	b.WriteString(input[last:])
	return b.String(), values, true
}

// placeholderDigits write a placeholder's literal index: none of them is
// a quote or a backslash.
const placeholderDigits = "0123456789abcdefghijklmnopqrstuv"

// fits reports whether literal k has a placeholder n bytes long: the mark
// and k's digits (a literal without one stays in the shape as it is).
func fits(k, n int) bool {
	for i := 1; i < n; i++ {
		k /= len(placeholderDigits)
	}
	return k == 0
}

// placeholder is literal k's stand-in, n bytes long: the mark, then k in
// placeholderDigits, padded with the mark.
func placeholder(k, n int) string {
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = placeholderMark
	}
	for i := n - 1; i >= 1 && k > 0; i-- {
		buf[i] = placeholderDigits[k%len(placeholderDigits)]
		k /= len(placeholderDigits)
	}
	return string(buf)
}

// placeholderIndex is the literal index of a placeholder, false for any
// other string.
func placeholderIndex(s string) (int, bool) {
	if len(s) < 3 || s[0] != placeholderMark {
		return 0, false
	}
	k := 0
	for i := 1; i < len(s); i++ {
		if s[i] == placeholderMark {
			continue
		}
		d := strings.IndexByte(placeholderDigits, s[i])
		if d < 0 {
			return 0, false
		}
		k = k*len(placeholderDigits) + d
	}
	return k, true
}

// treeCopier copies a kept tree with the query's literal values put back.
type treeCopier struct {
	values []string
	used   []bool
	ok     bool
	failed bool
}

// str returns s, or the value its placeholder stands for.
func (c *treeCopier) str(s string) string {
	k, ok := placeholderIndex(s)
	if !ok {
		return s
	}
	if k >= len(c.values) {
		c.failed = true
		return s
	}
	c.used[k] = true
	return c.values[k]
}

func (c *treeCopier) strs(ss []string) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = c.str(s)
	}
	return out
}

// expr copies e; c.ok says whether every node was one it knows.
func (c *treeCopier) expr(e parser.Expr) parser.Expr {
	c.ok = true
	out := c.node(e)
	c.ok = c.ok && !c.failed
	return out
}

func (c *treeCopier) node(e parser.Expr) parser.Expr {
	if e == nil || !c.ok {
		return e
	}
	switch n := e.(type) {
	case *parser.AggregateExpr:
		x := *n
		x.Expr, x.Param, x.Grouping = c.node(n.Expr), c.node(n.Param), c.strs(n.Grouping)
		return &x
	case *parser.BinaryExpr:
		x := *n
		x.LHS, x.RHS = c.node(n.LHS), c.node(n.RHS)
		if n.VectorMatching != nil {
			vm := *n.VectorMatching
			vm.MatchingLabels, vm.Include = c.strs(vm.MatchingLabels), c.strs(vm.Include)
			x.VectorMatching = &vm
		}
		return &x
	case *parser.Call:
		x := *n
		x.Args = make(parser.Expressions, len(n.Args))
		for i, a := range n.Args {
			x.Args[i] = c.node(a)
		}
		return &x
	case *parser.MatrixSelector:
		if n.RangeExpr != nil {
			c.ok = false
			return e
		}
		x := *n
		x.VectorSelector = c.node(n.VectorSelector)
		return &x
	case *parser.SubqueryExpr:
		if n.RangeExpr != nil || n.OriginalOffsetExpr != nil || n.StepExpr != nil {
			c.ok = false
			return e
		}
		x := *n
		x.Expr, x.Timestamp = c.node(n.Expr), copyTimestamp(n.Timestamp)
		return &x
	case *parser.NumberLiteral:
		x := *n
		return &x
	case *parser.StringLiteral:
		x := *n
		x.Val = c.str(n.Val)
		return &x
	case *parser.ParenExpr:
		x := *n
		x.Expr = c.node(n.Expr)
		return &x
	case *parser.UnaryExpr:
		x := *n
		x.Expr = c.node(n.Expr)
		return &x
	case *parser.VectorSelector:
		return c.vectorSelector(n)
	default:
		c.ok = false
		return e
	}
}

// copyTimestamp copies an @ time: the engine sets a copy's own.
func copyTimestamp(ts *int64) *int64 {
	if ts == nil {
		return nil
	}
	t := *ts
	return &t
}

func (c *treeCopier) vectorSelector(n *parser.VectorSelector) parser.Expr {
	if n.OriginalOffsetExpr != nil || n.Series != nil || n.UnexpandedSeriesSet != nil {
		c.ok = false
		return n
	}
	x := *n
	x.Name, x.Timestamp = c.str(n.Name), copyTimestamp(n.Timestamp)
	x.LabelMatchers = make([]*labels.Matcher, len(n.LabelMatchers))
	notEmpty := false
	for i, m := range n.LabelMatchers {
		name, value := c.str(m.Name), c.str(m.Value)
		if name != m.Name || value != m.Value {
			nm, err := labels.NewMatcher(m.Type, name, value)
			if err != nil {
				c.failed = true
				return n
			}
			m = nm
		}
		x.LabelMatchers[i] = m
		notEmpty = notEmpty || !m.Matches("")
	}
	// The parser's check, which the placeholders passed for the values.
	if x.Name == "" && !x.BypassEmptyMatcherCheck && !notEmpty {
		c.failed = true
	}
	return &x
}
