package tracequery

import (
	"bytes"
	"testing"
)

// FuzzParseTempoTrace: any Tempo trace-by-id response parses or fails; it
// never panics and every span it returns has ids.
func FuzzParseTempoTrace(f *testing.F) {
	f.Add([]byte(tempoTraceV1))
	f.Add([]byte(tempoTraceV2))
	f.Add([]byte(`{"trace":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		spans, err := ParseTempoTrace(body)
		if err != nil {
			return
		}
		for _, s := range spans {
			if s.TraceID.IsZero() || s.SpanID.IsZero() {
				t.Fatalf("span without ids: %+v", s)
			}
		}
	})
}

// FuzzParseTempoSearch never panics and returns only trace ids it could read.
func FuzzParseTempoSearch(f *testing.F) {
	f.Add([]byte(tempoSearchBody))
	f.Add([]byte(`{"traces":[{"traceID":"1"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := ParseTempoSearch(body); err != nil {
			return
		}
	})
}

// FuzzParseJaeger never panics on any /api/traces response.
func FuzzParseJaeger(f *testing.F) {
	f.Add([]byte(jaegerBody))
	f.Add([]byte(`{"data":[],"errors":[{"code":404,"msg":"trace not found"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		spans, err := ParseJaeger(body)
		// encoding/json matches keys case-insensitively ("spAnID" is spanID).
		if err == nil && len(spans) > 0 && !bytes.Contains(bytes.ToLower(body), []byte("spanid")) {
			t.Fatalf("%d spans from a body without span ids", len(spans))
		}
	})
}

// FuzzReadJSONL: a traces.jsonl either loads or fails with file:line; it
// never panics, and what loads is within the counts it reports.
func FuzzReadJSONL(f *testing.F) {
	f.Add([]byte(jsonlLine + "\n" + jsonlLine + "\n"))
	f.Add([]byte("\n\n" + jsonlLine))
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"00"}]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := ReadJSONL(bytes.NewReader(data), "traces.jsonl")
		if err != nil {
			if !bytes.HasPrefix([]byte(err.Error()), []byte("traces.jsonl:")) {
				t.Fatalf("error without a position: %v", err)
			}
			return
		}
		if file.Len() > file.Spans {
			t.Fatalf("holds %d spans, loaded %d", file.Len(), file.Spans)
		}
	})
}
