package scrape

import (
	"fmt"
	"mime"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/whyslow/whyslow/collectors/bundle"
)

// Sample is one scraped float sample, target labels applied.
type Sample struct {
	Labels labels.Labels
	// T is the timestamp in milliseconds: the exposition's own, or the
	// scrape time when it has none.
	T int64
	V float64
}

// FormatFor returns the exposition format for a response Content-Type, as
// Prometheus decides it: OpenMetrics for application/openmetrics-text,
// classic text for text/plain and, as the fallback, for a missing or
// unknown type. Protobuf (never asked for) is an error.
func FormatFor(contentType string) (bundle.Format, error) {
	if contentType == "" {
		return bundle.FormatPrometheusText, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return bundle.FormatPrometheusText, nil
	}
	switch mt {
	case "application/openmetrics-text":
		return bundle.FormatOpenMetrics, nil
	case "application/vnd.google.protobuf":
		return 0, fmt.Errorf("unsupported content type %q (protobuf)", contentType)
	default:
		return bundle.FormatPrometheusText, nil
	}
}

// Parse turns a scrape body into samples. target holds the labels every
// sample gets (job, instance, target); an exposed label of the same name is kept as
// exported_<name>, as Prometheus does without honor_labels. Samples without
// a timestamp get at. name prefixes errors (the target's URL).
func Parse(name string, body []byte, contentType string, at time.Time, target labels.Labels) ([]Sample, error) {
	f, err := FormatFor(contentType)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p, err := bundle.NewTextParser(name, body, f)
	if err != nil {
		return nil, err
	}
	var (
		out  []Sample
		ls   labels.Labels
		b    = labels.NewBuilder(labels.EmptyLabels())
		atMs = at.UnixMilli()
	)
	for {
		ok, err := p.Next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		p.Labels(&ls)
		if n, dup := ls.HasDuplicateLabelNames(); dup {
			return nil, p.Errorf("series %s has label %q twice", p.Series(), n)
		}
		// An empty exposed label is no label (Prometheus drops it); drop it
		// before the target's labels go on, or an exposed job="" would
		// delete the target's job.
		b.Reset(ls)
		ls.Range(func(l labels.Label) {
			if l.Value == "" {
				b.Del(l.Name)
			}
		})
		target.Range(func(l labels.Label) {
			if v := ls.Get(l.Name); v != "" {
				b.Set("exported_"+l.Name, v)
			}
			b.Set(l.Name, l.Value)
		})
		t, hasT := p.Timestamp()
		if !hasT {
			t = atMs
		}
		out = append(out, Sample{Labels: b.Labels(), T: t, V: p.Value()})
	}
}

// instanceOf returns the host:port of a URL, adding the scheme's default
// port as Prometheus does for the instance label.
func instanceOf(scheme, host string) string {
	if strings.LastIndexByte(host, ':') > strings.LastIndexByte(host, ']') {
		return host
	}
	if scheme == "https" {
		return host + ":443"
	}
	return host + ":80"
}

// targetOf returns the target label of a URL: its path, "/" when it has
// none. The query is left out: it may hold a credential.
func targetOf(u *url.URL) string {
	if u.Path == "" {
		return "/"
	}
	return u.Path
}
