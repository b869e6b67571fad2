package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// visibleEntry is one item of a CUDA_VISIBLE_DEVICES-style list: a GPU
// index, or a GPU UUID (or a unique prefix of one, as CUDA accepts).
type visibleEntry struct {
	index int    // -1 for a UUID entry
	uuid  string // lower case, "gpu-..." form
	raw   string
}

// parseVisible parses a comma-separated list of GPU indices and UUIDs. An
// empty list means every GPU. MIG instances are refused: the collector reads
// whole GPUs.
func parseVisible(s string) ([]visibleEntry, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []visibleEntry
	seen := map[string]bool{}
	for i, tok := range strings.Split(s, ",") {
		tok = strings.TrimSpace(tok)
		where := fmt.Sprintf("visible devices %q: entry %d %q", s, i+1, tok)
		low := strings.ToLower(tok)
		switch {
		case tok == "":
			return nil, fmt.Errorf("%s: empty entry", where)
		case strings.HasPrefix(low, "mig-"):
			return nil, fmt.Errorf("%s: MIG instances are not supported, list the parent GPU", where)
		case strings.HasPrefix(low, "gpu-"):
			if len(low) == len("gpu-") {
				return nil, fmt.Errorf("%s: UUID has nothing after GPU-", where)
			}
			if !seen[low] {
				out = append(out, visibleEntry{index: -1, uuid: low, raw: tok})
			}
			seen[low] = true
		default:
			n, err := strconv.Atoi(tok)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%s: want a GPU index (0, 1, ...) or a GPU UUID (GPU-...)", where)
			}
			key := strconv.Itoa(n)
			if !seen[key] {
				out = append(out, visibleEntry{index: n, raw: tok})
			}
			seen[key] = true
		}
	}
	return out, nil
}

// matches reports whether the GPU with this index and UUID is the entry.
func (e visibleEntry) matches(index int, uuid string) bool {
	if e.index >= 0 {
		return e.index == index
	}
	return uuid != "" && strings.HasPrefix(strings.ToLower(uuid), e.uuid)
}

// selectVisible returns, for each GPU (index, uuid) pair, whether it is
// selected, plus a note for every entry that matched no GPU or several.
func selectVisible(entries []visibleEntry, indices []int, uuids []string) ([]bool, []string) {
	keep := make([]bool, len(indices))
	if len(entries) == 0 {
		for i := range keep {
			keep[i] = true
		}
		return keep, nil
	}
	var notes []string
	for _, e := range entries {
		hits := 0
		for i := range indices {
			if e.matches(indices[i], uuids[i]) {
				keep[i] = true
				hits++
			}
		}
		switch {
		case hits == 0:
			notes = append(notes, fmt.Sprintf("visible device %q matches no GPU (%d found)", e.raw, len(indices)))
		case hits > 1:
			notes = append(notes, fmt.Sprintf("visible device %q matches %d GPUs; all are read", e.raw, hits))
		}
	}
	return keep, notes
}

// pidsMatch reports whether any of running is in engine.
func pidsMatch(engine map[uint32]bool, running []uint32) bool {
	for _, p := range running {
		if engine[p] {
			return true
		}
	}
	return false
}
