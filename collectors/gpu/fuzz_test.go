package gpu

import (
	"strings"
	"testing"
)

// FuzzParseVisible checks that any visible-devices list either parses into
// well-formed entries or fails with an error naming the list, never panics.
func FuzzParseVisible(f *testing.F) {
	for _, s := range []string{"", "0", "0,1,2", "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "MIG-x", "1,,2", "-1", " 3 , GPU-ab "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		entries, err := parseVisible(s)
		if err != nil {
			if !strings.Contains(err.Error(), "visible devices") {
				t.Errorf("error %q does not name the list", err)
			}
			return
		}
		for _, e := range entries {
			if e.index < 0 && !strings.HasPrefix(e.uuid, "gpu-") {
				t.Errorf("entry %+v is neither an index nor a GPU UUID", e)
			}
		}
		keep, _ := selectVisible(entries, []int{0, 1}, []string{"GPU-aa", ""})
		if len(keep) != 2 {
			t.Errorf("keep has %d entries for 2 GPUs", len(keep))
		}
	})
}
