package rulesets

import (
	"fmt"
	"iter"
	"maps"
	"os"
	"slices"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/rules"
)

// Maps are the engine maps one run knows, in the engine list's order: the
// shipped ones, then a user's (a --ruleset file with `engine:`). One value,
// built once, is what every reader of the maps takes: the triage's joins
// (Series), the detector (Files), the chart (Chart, Rulesets).
type Maps struct {
	list []engineMap
	// parsed are the maps' chart and series sections, decoded once.
	parsed func() []mapSections
	// held, when not nil (Releasable), holds the shipped rulesets these
	// maps compiled, by engine, in place of the process-wide cache.
	held *heldRulesets
}

type heldRulesets struct {
	mu sync.Mutex
	rs map[string]*rules.Ruleset
}

func newMaps(list []engineMap) *Maps {
	m := &Maps{list: list}
	m.parsed = sync.OnceValue(m.sections)
	return m
}

type engineMap struct {
	engine string
	// file is the map's file; a shipped one's Data is nil, read from FS
	// when asked (data): a copy held for the process's life was ~70 KB of
	// a sidecar's live heap, read only at start and at a compile.
	file rules.File
	// user is a user's ruleset, compiled with the user's files; nil for a
	// shipped map (compiled on demand by Default).
	user *rules.Ruleset
}

// Shipped returns the shipped maps, in Engines order.
func Shipped() *Maps {
	var list []engineMap
	for _, e := range Engines {
		list = append(list, engineMap{engine: e, file: rules.File{Name: e + ".yaml"}})
	}
	return newMaps(list)
}

// data returns the map file's bytes: a user's as loaded, a shipped one's
// read from FS.
func (em engineMap) data() []byte {
	if em.file.Data != nil {
		return em.file.Data
	}
	f, _ := file(em.file.Name) // Engines lists files that exist
	return f.Data
}

// WithUser returns the maps with those of the user's rulesets added: a map
// for an engine not known yet comes last, one for a known engine (a
// user's file on top of a shipped map) takes its place. Rulesets without a
// map are skipped.
func (m *Maps) WithUser(rss ...*rules.Ruleset) *Maps {
	list := slices.Clone(m.list)
	for _, rs := range rss {
		if rs == nil || rs.Engine == "" || rs.Map.Data == nil {
			continue
		}
		em := engineMap{engine: rs.Engine, file: rs.Map, user: rs}
		if i := slices.IndexFunc(list, func(x engineMap) bool { return x.engine == rs.Engine }); i >= 0 {
			list[i] = em
		} else {
			list = append(list, em)
		}
	}
	return newMaps(list)
}

// Releasable returns the same maps with a cache of their own for the
// shipped rulesets they compile, which Release empties: a daemon holds a
// compiled ruleset (vllm's is ~1.7 MB of live heap) only while it triages
// with it. The process-wide cache (Default) is neither read nor filled.
func (m *Maps) Releasable() *Maps {
	return &Maps{list: m.list, parsed: m.parsed, held: &heldRulesets{rs: map[string]*rules.Ruleset{}}}
}

// Release drops the shipped rulesets Releasable maps hold; the next read
// compiles them again. It returns the engines dropped, sorted; maps that
// are not Releasable hold none.
func (m *Maps) Release() []string {
	if m.held == nil {
		return nil
	}
	m.held.mu.Lock()
	defer m.held.mu.Unlock()
	out := slices.Sorted(maps.Keys(m.held.rs))
	clear(m.held.rs)
	return out
}

// Held returns the engines whose shipped rulesets Releasable maps hold,
// sorted.
func (m *Maps) Held() []string {
	if m.held == nil {
		return nil
	}
	m.held.mu.Lock()
	defer m.held.mu.Unlock()
	return slices.Sorted(maps.Keys(m.held.rs))
}

// Engines returns the engines the maps name, in order.
func (m *Maps) Engines() []string {
	out := make([]string, len(m.list))
	for i, em := range m.list {
		out[i] = em.engine
	}
	return out
}

// Knows reports whether a map names the engine.
func (m *Maps) Knows(engine string) bool { return slices.Contains(m.Engines(), engine) }

// Unknown is the error for an engine no map names: it lists the maps
// loaded and says how to add one.
func (m *Maps) Unknown(engine string) error {
	var user []string
	for _, em := range m.list {
		if em.user != nil && !slices.Contains(Engines, em.engine) {
			user = append(user, fmt.Sprintf("%s (%s)", em.engine, em.file.Name))
		}
	}
	loaded := "shipped maps " + OneOf(Engines...)
	if len(user) > 0 {
		loaded += "; yours: " + OneOf(user...)
	}
	return fmt.Errorf("unknown engine %q: no engine map names it (%s); a map for another engine is given with `whyslow why --ruleset FILE`, or the daemon config's `rulesets:`", engine, loaded)
}

// Files yields each engine and its map's bytes, in order: the detector
// reads its section from them (detect.ReadEngines).
func (m *Maps) Files() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, em := range m.list {
			if !yield(em.engine, em.data()) {
				return
			}
		}
	}
}

// Rulesets returns each map's compiled ruleset, in order: a user's as it
// was loaded, a shipped one's by Default. One that does not compile is
// left out.
func (m *Maps) Rulesets() []*rules.Ruleset {
	var out []*rules.Ruleset
	for _, em := range m.list {
		if rs, err := m.ruleset(em); err == nil {
			out = append(out, rs) // a shipped one that fails, fails TestShippedRulesets
		}
	}
	return out
}

// sections decodes each map's `chart:` and `series:` sections, in order;
// rules.Parse has checked them.
func (m *Maps) sections() []mapSections {
	out := make([]mapSections, len(m.list))
	for i, em := range m.list {
		_ = yaml.Unmarshal(em.data(), &out[i])
		out[i].Series.Engine = em.engine
		out[i].Chart.Engine, out[i].Chart.KVUsage = em.engine, out[i].Series.KVUsage
	}
	return out
}

type mapSections struct {
	Chart  Panels             `yaml:"chart"`
	Series rules.EngineSeries `yaml:"series"`
}

// Series returns each map's `series:` section, in order: the joins that
// find a target whatever engine serves it.
func (m *Maps) Series() []rules.EngineSeries {
	var out []rules.EngineSeries
	for _, s := range m.parsed() {
		out = append(out, s.Series)
	}
	return out
}

// Chart returns each map's `chart:` section, in order.
func (m *Maps) Chart() []Panels {
	var out []Panels
	for _, s := range m.parsed() {
		out = append(out, s.Chart)
	}
	return out
}

// For returns the rulesets a triage of engine needs: that engine's map's
// alone, or every map's for "auto" (or "") to detect it from. A shipped
// map is compiled on first use (Default).
func (m *Maps) For(engine string) ([]*rules.Ruleset, error) {
	var out []*rules.Ruleset
	for _, em := range m.list {
		if engine != "" && engine != "auto" && em.engine != engine {
			continue
		}
		rs, err := m.ruleset(em)
		if err != nil {
			return nil, err
		}
		out = append(out, rs)
	}
	if len(out) == 0 {
		return nil, m.Unknown(engine)
	}
	return out, nil
}

// Check reports whether For(engine) has a map to read, as For does, but
// compiles nothing: a shipped map cannot fail to compile (the tests compile
// every one) and a user's was compiled when it was loaded, so what is left
// to check is the engine's name.
func (m *Maps) Check(engine string) error {
	if engine == "" || engine == "auto" {
		if len(m.list) > 0 {
			return nil
		}
	} else if m.Knows(engine) {
		return nil
	}
	return m.Unknown(engine)
}

// Others returns the rulesets of every map but engine's (for
// diagnose.Options.OtherEngines); one that does not compile is left out.
func (m *Maps) Others(engine string) []*rules.Ruleset {
	var out []*rules.Ruleset
	for _, em := range m.list {
		if em.engine == engine {
			continue
		}
		if rs, err := m.ruleset(em); err == nil {
			out = append(out, rs)
		}
	}
	return out
}

// ruleset is the map's compiled ruleset: a user's as it was loaded, a
// shipped one's by Default, or held by Releasable maps.
func (m *Maps) ruleset(em engineMap) (*rules.Ruleset, error) {
	if em.user != nil {
		return em.user, nil
	}
	if m.held == nil {
		return Default(em.engine)
	}
	m.held.mu.Lock()
	defer m.held.mu.Unlock()
	if rs, ok := m.held.rs[em.engine]; ok {
		return rs, nil
	}
	rs, err := compileShipped(em.engine)
	if err != nil {
		return nil, err
	}
	m.held.rs[em.engine] = rs
	return rs, nil
}

var (
	userMapsMu sync.Mutex
	// userMaps are the user's map files compiled so far, by path and
	// content: a daemon validates its config several times (load, start,
	// reload), and a map takes tens of milliseconds to compile.
	userMaps = map[[2]string]*rules.Ruleset{}
)

// LoadMap reads a user's engine map (a file with `engine:`) on top of the
// shipped catalogue and rulebook, as Load does; a file that names no engine
// is an error. Problems in the file are reported at file:line:col.
func LoadMap(path string) (*rules.Ruleset, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read engine map: %w", err)
	}
	if !rules.DeclaresEngine(b) {
		return nil, fmt.Errorf("%s: not an engine map: it has no `engine:` (a map names its engine; see rulesets/README.md, \"Adding an engine\")", path)
	}
	key := [2]string{path, string(b)}
	userMapsMu.Lock()
	defer userMapsMu.Unlock()
	if rs, ok := userMaps[key]; ok {
		return rs, nil
	}
	rs, err := Load("", path)
	if err != nil {
		return nil, err
	}
	userMaps[key] = rs
	return rs, nil
}
