package yamlpos

import "testing"

func TestString(t *testing.T) {
	want := map[Pos]string{
		{File: "a.yaml"}:                  "a.yaml",
		{File: "a.yaml", Line: 3}:         "a.yaml:3",
		{File: "a.yaml", Line: 3, Col: 7}: "a.yaml:3:7",
	}
	for p, w := range want {
		if got := p.String(); got != w {
			t.Errorf("%#v: got %q, want %q", p, got, w)
		}
	}
}

// TestErrorLine covers yaml.v3's two forms: a syntax error ("yaml: line N:
// ...") and one line of a type error ("line N: ..."); a message naming no
// line is not split.
func TestErrorLine(t *testing.T) {
	if line, rest, ok := ErrorLine("yaml: line 3: did not find expected key"); line != 3 || rest != "did not find expected key" || !ok {
		t.Errorf("syntax error: got %d %q %v", line, rest, ok)
	}
	if line, rest, ok := ErrorLine("line 12: cannot unmarshal !!str `x` into int"); line != 12 || rest != "cannot unmarshal !!str `x` into int" || !ok {
		t.Errorf("type error: got %d %q %v", line, rest, ok)
	}
	if _, _, ok := ErrorLine("yaml: did not find expected node content"); ok {
		t.Error("a message without a line was split")
	}
}
