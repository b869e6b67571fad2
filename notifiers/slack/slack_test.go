package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	testToken   = "xoxb-1111-2222-SECRETtokenVALUE"
	hookSecret  = "T000/B000/HOOKsecretPATHvalue"
	hookSecret2 = "T000/B111/PRODhookSECRETvalue"
)

var t0 = notifytest.T0

func tinyPNG() []byte {
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, 2, 2)))
	return b.Bytes()
}

func botConfig(f *fakeSlack) Config {
	return Config{
		Token:   testToken,
		Channel: "#llm-oncall",
		APIURL:  f.APIURL(),
		Routes: []Route{
			{Match: map[string]string{"namespace": "inference"}, Channel: "#inference-oncall"},
			{MatchRE: map[string]string{"cluster": "us-.*"}, Channel: "#us-llm"},
		},
		Timeout: 5 * time.Second,
	}
}

func newBot(t *testing.T, f *fakeSlack, log *slog.Logger) *Notifier {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n, err := New(botConfig(f), Options{Name: "oncall", Logger: log,
		Chart: func(context.Context, *verdict.Verdict, time.Time) ([]byte, error) { return tinyPNG(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sequence is an incident's open, update (new top cause, escalated),
// repeat and resolve notifications.
func sequence() []*notifiers.Notification {
	open := notifytest.Anomaly()
	open.Severity = verdict.SeverityWarning
	upd := notifytest.Anomaly()
	upd.At = t0.Add(10 * time.Minute)
	upd.Causes[0], upd.Causes[1] = upd.Causes[1], upd.Causes[0]
	upd.Causes[0].Rank, upd.Causes[1].Rank = 1, 2
	upd.Causes[0].Score, upd.Causes[1].Score = upd.Causes[1].Score, upd.Causes[0].Score
	rep := notifytest.Anomaly()
	rep.At = t0.Add(4 * time.Hour)
	res := notifytest.Healthy()
	res.Scope, res.Engine = open.Scope, "vllm"
	res.At = t0.Add(5 * time.Hour)
	kinds := []notifiers.Transition{notifiers.TransitionOpen, notifiers.TransitionUpdate, notifiers.TransitionRepeat, notifiers.TransitionResolve}
	verdicts := []*verdict.Verdict{open, upd, rep, res}
	var out []*notifiers.Notification
	for i, k := range kinds {
		out = append(out, &notifiers.Notification{
			ID: notifiers.MakeID("oncall", "inc-42", i+1, k), Receiver: "oncall", IncidentID: "inc-42",
			IncidentKey: "scope/queue_saturation", Kind: k, Sequence: i + 1, CreatedAt: verdicts[i].At,
			VerdictURL: "https://whyslow.example.com/api/v1/incidents/inc-42/verdicts/" + fmt.Sprint(i+1),
			Verdict:    verdicts[i],
		})
	}
	return out
}

// deliver sends the notifications in order, carrying the state along as
// the outbox does.
func deliver(t *testing.T, n *Notifier, ns []*notifiers.Notification) notifiers.State {
	t.Helper()
	st := notifiers.State{}
	for _, x := range ns {
		x.State = st
		if retry, err := n.Notify(context.Background(), x); err != nil {
			t.Fatalf("%s: retry=%v err=%v", x.ID, retry, err)
		}
		st = x.State
	}
	return st
}

type goldenCall struct {
	Method   string          `json:"method"`
	Channel  string          `json:"channel,omitempty"`
	TS       string          `json:"ts,omitempty"`
	ThreadTS string          `json:"thread_ts,omitempty"`
	Text     string          `json:"text,omitempty"`
	Blocks   json.RawMessage `json:"blocks,omitempty"`
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update and review the diff):\n%s", name, got)
	}
}

func goldenOf(t *testing.T, calls []call) []byte {
	t.Helper()
	var gs []goldenCall
	for _, c := range calls {
		if c.Method == "upload" {
			gs = append(gs, goldenCall{Method: c.Method})
			continue
		}
		gs = append(gs, goldenCall{Method: c.Method, Channel: c.Channel, TS: c.TS, ThreadTS: c.ThreadTS, Text: c.Text, Blocks: c.Blocks})
	}
	b, err := json.MarshalIndent(gs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(unescapeHTML(b), '\n')
}

func TestBotSequence(t *testing.T) {
	f := newFakeSlack(t)
	n := newBot(t, f, nil)
	st := deliver(t, n, sequence())

	wantMethods := []string{
		"chat.postMessage", "files.getUploadURLExternal", "upload", "files.completeUploadExternal", // open: parent + chart
		"chat.postMessage", "chat.update", "files.getUploadURLExternal", "upload", "files.completeUploadExternal", // update
		"chat.postMessage", "chat.update", // repeat
		"chat.postMessage", "chat.update", // resolve
	}
	if got := f.Methods(); !reflect.DeepEqual(got, wantMethods) {
		t.Fatalf("methods:\n got %v\nwant %v", got, wantMethods)
	}
	calls := f.Calls()
	parent := calls[0]
	if parent.ThreadTS != "" || parent.Channel != "#inference-oncall" {
		t.Errorf("parent posted to %q thread %q, want #inference-oncall (route namespace=inference), no thread", parent.Channel, parent.ThreadTS)
	}
	for i, c := range calls[1:] {
		switch c.Method {
		case "chat.postMessage", "files.completeUploadExternal":
			if c.ThreadTS != parent.TS || c.Channel != "CINFERENCE-ONCALL" {
				t.Errorf("call %d %s: channel %q thread_ts %q, want CINFERENCE-ONCALL %q", i+1, c.Method, c.Channel, c.ThreadTS, parent.TS)
			}
		case "chat.update":
			if c.TS != parent.TS || c.Channel != "CINFERENCE-ONCALL" {
				t.Errorf("call %d chat.update: channel %q ts %q, want the parent %q", i+1, c.Channel, c.TS, parent.TS)
			}
		case "upload":
			if c.Auth != "Bearer "+testToken || !strings.Contains(c.Body, "\x89PNG") {
				t.Errorf("upload: auth or PNG body missing")
			}
		}
		if c.Method != "upload" && c.Token != testToken {
			t.Errorf("call %d %s: token not sent", i+1, c.Method)
		}
	}
	// The parent ends RESOLVED.
	last := calls[len(calls)-1]
	if !strings.Contains(string(last.Blocks), "RESOLVED") || !strings.HasPrefix(last.Text, "[RESOLVED]") {
		t.Errorf("final chat.update is not RESOLVED: %s", last.Text)
	}
	if st.Get(StateTS) != parent.TS || st.Get(StateChannel) != "CINFERENCE-ONCALL" || st.Get(StateLastSeq) != "4" ||
		st.Get(StateProgress) != "" || st.Get(StateUpdates) != "2" {
		t.Errorf("state = %v", st)
	}
	checkGolden(t, "sequence.golden.json", goldenOf(t, calls))

	// Redelivering any notification already delivered posts nothing.
	before := len(f.All())
	for _, x := range sequence() {
		x.State = st
		if _, err := n.Notify(context.Background(), x); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(f.All()); got != before {
		t.Errorf("redelivery made %d calls", got-before)
	}
}

func TestBlocksWithinLimits(t *testing.T) {
	v := notifytest.Anomaly()
	for i := range 30 {
		v.Causes = append(v.Causes, verdict.Cause{ID: fmt.Sprintf("c%d", i), Title: strings.Repeat("long title ", 40),
			Evidence: []verdict.Evidence{{Text: strings.Repeat("<evidence> & ", 400)}}})
		v.RuledOut = append(v.RuledOut, verdict.RuledOut{ID: "r", Reason: "x"})
	}
	v.Scope.Selector = strings.Repeat(`pod="x",`, 50) + `job="y"`
	for _, kind := range []MessageKind{KindParent, KindReply, KindStandalone} {
		m := Blocks(v, RenderOptions{Kind: kind, MaxCauses: 40})
		if len(m.Blocks) > maxBlocks {
			t.Errorf("%v: %d blocks", kind, len(m.Blocks))
		}
		b := blocksJSON(t, m.Blocks)
		var raw []struct {
			Type string `json:"type"`
			Text *struct {
				Text string `json:"text"`
			} `json:"text"`
			Fields []struct {
				Text string `json:"text"`
			} `json:"fields"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		for i, bl := range raw {
			if bl.Text == nil {
				continue
			}
			limit := maxSectionChars
			if bl.Type == "header" {
				limit = maxHeaderChars
			}
			if n := len([]rune(bl.Text.Text)); n > limit {
				t.Errorf("%v block %d (%s): %d chars", kind, i, bl.Type, n)
			}
			if len(bl.Fields) > maxFields {
				t.Errorf("%v block %d: %d fields", kind, i, len(bl.Fields))
			}
		}
		if strings.Contains(string(b), "<evidence>") {
			t.Errorf("%v: unescaped < in mrkdwn", kind)
		}
	}
	if m := Blocks(nil, RenderOptions{}); len(m.Blocks) == 0 || m.Text == "" {
		t.Error("nil verdict renders nothing")
	}
}

func TestBlocksStatuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    *verdict.Verdict
		want []string
	}{
		{"anomaly", notifytest.Anomaly(), []string{":red_circle: CRITICAL · prefill slower (TTFT)", "TTFT p95", "2.41 s", "×7.77",
			"Requests are queueing", "*Fix:*", "Ruled out", "GPU clocks throttled", "Data gap"}},
		{"healthy", notifytest.Healthy(), []string{":large_green_circle: HEALTHY", "No anomaly against the baseline", "ITL p95"}},
		{"insufficient", notifytest.Insufficient(), []string{":grey_question: INSUFFICIENT DATA", "n/a", "down for 4m10s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Blocks(tc.v, RenderOptions{Kind: KindStandalone, VerdictURL: "https://w.example/v/1"})
			b := blocksJSON(t, m.Blocks)
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("blocks lack %q", w)
				}
			}
			if !strings.Contains(string(b), "<https://w.example/v/1|Verdict page>") {
				t.Error("no verdict link")
			}
		})
	}
}

func TestWebhookMode(t *testing.T) {
	f := newFakeSlack(t)
	cfg := Config{
		WebhookURL: notifiers.Secret(f.HookURL(hookSecret)),
		Routes:     []Route{{Match: map[string]string{"namespace": "prod"}, WebhookURL: notifiers.Secret(f.HookURL(hookSecret2))}},
	}
	n, err := New(cfg, Options{Chart: func(context.Context, *verdict.Verdict, time.Time) ([]byte, error) { return tinyPNG(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if n.Mode() != ModeWebhook {
		t.Fatalf("mode = %v", n.Mode())
	}
	ns := sequence()
	deliver(t, n, ns)
	calls := f.Calls()
	if len(calls) != len(ns) {
		t.Fatalf("%d calls, want one webhook message per transition (%d): %v", len(calls), len(ns), f.Methods())
	}
	wantChange := []string{"New incident", "Top cause changed", "Still open", "Resolved"}
	for i, c := range calls {
		if c.Method != "webhook" || len(c.Blocks) == 0 || c.Text == "" {
			t.Errorf("call %d: %+v", i, c)
		}
		if !strings.Contains(string(c.Blocks), wantChange[i]) {
			t.Errorf("call %d lacks %q", i, wantChange[i])
		}
		if strings.Contains(c.Body, "thread_ts") {
			t.Errorf("call %d: webhooks cannot thread", i)
		}
	}
	checkGolden(t, "webhook.golden.json", goldenOf(t, calls[:1]))

	// Routing picks the prod webhook for a prod scope.
	x := sequence()[0]
	x.Verdict.Scope = verdict.Scope{Selector: `namespace="prod",model_name="m"`}
	if _, err := n.Notify(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	all := f.All()
	if got := all[len(all)-1]; !strings.Contains(fmt.Sprint(got.Body), "namespace") {
		t.Errorf("prod message body: %s", got.Body)
	}
}

func TestRoute(t *testing.T) {
	f := newFakeSlack(t)
	n := newBot(t, f, nil)
	for _, tc := range []struct {
		scope verdict.Scope
		want  string
	}{
		{verdict.Scope{Labels: map[string]string{"namespace": "inference"}}, "#inference-oncall"},
		{verdict.Scope{Selector: `namespace="inference",model_name="x"`}, "#inference-oncall"},
		{verdict.Scope{Selector: `cluster="us-east-1"`}, "#us-llm"},
		{verdict.Scope{Selector: `cluster=~"us-.*"`}, "#llm-oncall"}, // not an equality matcher
		{verdict.Scope{Selector: `cluster="eu-west"`}, "#llm-oncall"},
		{verdict.Scope{Labels: map[string]string{"namespace": "inference", "cluster": "us-1"}}, "#inference-oncall"}, // first match wins
		{verdict.Scope{Selector: `not a selector`}, "#llm-oncall"},
		{verdict.Scope{}, "#llm-oncall"},
	} {
		if got := n.Route(tc.scope).Channel; got != tc.want {
			t.Errorf("Route(%+v) = %s, want %s", tc.scope, got, tc.want)
		}
	}
}

func TestConfig(t *testing.T) {
	LookupEnv = func(k string) (string, bool) {
		if k == "SLACK_BOT_TOKEN" {
			return testToken, true
		}
		return "", false
	}
	t.Cleanup(func() { LookupEnv = os.LookupEnv })
	for _, tc := range []struct {
		name, yaml, err string
	}{
		{"bot", "token: ${SLACK_BOT_TOKEN}\nchannel: '#x'\n", ""},
		{"webhook", "webhook_url: https://hooks.slack.com/services/" + hookSecret + "\n", ""},
		{"both", "token: xoxb-1\nwebhook_url: https://hooks.slack.com/x\nchannel: '#x'\n", "mutually exclusive"},
		{"neither", "channel: '#x'\n", "one of token"},
		{"no channel", "token: xoxb-1\n", "channel (the default channel) is required"},
		{"unset env", "token: ${NOPE}\nchannel: '#x'\n", "environment variable NOPE is not set"},
		{"unknown key", "token: xoxb-1\nchannel: '#x'\nchanel: y\n", "field chanel not found"},
		{"bad regexp", "token: xoxb-1\nchannel: '#x'\nroutes:\n- match_re: {model: '('}\n  channel: '#y'\n", "match_re model"},
		{"route without matcher", "token: xoxb-1\nchannel: '#x'\nroutes:\n- channel: '#y'\n", "needs match or match_re"},
		{"route without channel", "token: xoxb-1\nchannel: '#x'\nroutes:\n- match: {a: b}\n", "channel is required in bot mode"},
		{"bad token", "token: abc\nchannel: '#x'\n", "does not look like a Slack token"},
		{"bad webhook", "webhook_url: 'ftp://x/" + hookSecret + "'\n", "scheme must be http or https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			err := yamlUnmarshal(tc.yaml, &c)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			notifytest.AssertNoSecrets(t, []string{testToken, hookSecret}, err, fmt.Sprintf("%v %+v %#v", c, c, c))
			if tc.name == "bot" && string(c.Token) != testToken {
				t.Errorf("token not expanded from the environment")
			}
		})
	}
}

// TestPartialFailureNoDuplicate: the parent is posted, the chart upload
// fails; the retry uploads the chart and does not post a second parent.
func TestPartialFailureNoDuplicate(t *testing.T) {
	f := newFakeSlack(t)
	n := newBot(t, f, nil)
	x := sequence()[0]
	x.State = notifiers.State{}
	f.setFail(func(m string) *failure {
		if m == "files.completeUploadExternal" {
			return &failure{Status: http.StatusServiceUnavailable}
		}
		return nil
	})
	retry, err := n.Notify(context.Background(), x)
	if !retry || notifiers.ReasonOf(err) != notifiers.ReasonServerError {
		t.Fatalf("retry=%v err=%v, want a retryable serverError", retry, err)
	}
	if x.State.Get(StateTS) == "" || x.State.Get(StateProgress) != "1:parent" {
		t.Fatalf("state after partial failure = %v", x.State)
	}
	f.setFail(nil)
	if _, err := n.Notify(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	posts := 0
	for _, c := range f.Calls() {
		if c.Method == "chat.postMessage" {
			posts++
		}
	}
	if posts != 1 {
		t.Errorf("%d parent posts, want 1 (methods %v)", posts, f.Methods())
	}

	// An update whose chat.update fails after the reply was posted: the
	// retry rewrites the parent without a second reply.
	u := sequence()[1]
	u.State = x.State
	f.setFail(func(m string) *failure {
		if m == "chat.update" {
			return &failure{SlackCode: "internal_error"}
		}
		return nil
	})
	if retry, err := n.Notify(context.Background(), u); !retry || err == nil {
		t.Fatalf("update: retry=%v err=%v", retry, err)
	}
	f.setFail(nil)
	before := len(f.Calls())
	if _, err := n.Notify(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range f.Calls()[before:] {
		got = append(got, c.Method)
	}
	want := []string{"chat.update", "files.getUploadURLExternal", "upload", "files.completeUploadExternal"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("retry of update made %v, want %v", got, want)
	}

	// A parent that was deleted does not block the thread.
	r := sequence()[3]
	r.State = u.State
	f.setFail(func(m string) *failure {
		if m == "chat.update" {
			return &failure{SlackCode: "message_not_found"}
		}
		return nil
	})
	if _, err := n.Notify(context.Background(), r); err != nil {
		t.Errorf("resolve with a deleted parent: %v", err)
	}
}

// TestChartFailures: a chart that cannot be rendered, or a permanent upload
// error (no files:write), is logged and skipped; the message is delivered.
func TestChartFailures(t *testing.T) {
	f := newFakeSlack(t)
	log, buf := notifytest.NewLogger()
	n, err := New(botConfig(f), Options{Logger: log, Chart: func(context.Context, *verdict.Verdict, time.Time) ([]byte, error) {
		return nil, errors.New("no data")
	}})
	if err != nil {
		t.Fatal(err)
	}
	x := sequence()[0]
	if _, err := n.Notify(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "Chart not uploaded") {
		t.Errorf("log: %s", buf.String())
	}
	n2 := newBot(t, f, nil)
	f.setFail(func(m string) *failure {
		if m == "files.getUploadURLExternal" {
			return &failure{SlackCode: "missing_scope"}
		}
		return nil
	})
	y := sequence()[0]
	if _, err := n2.Notify(context.Background(), y); err != nil {
		t.Errorf("missing files:write: %v", err)
	}
}

// TestUpdateWithoutParent: when the open was lost, the next notification
// becomes the parent.
func TestUpdateWithoutParent(t *testing.T) {
	f := newFakeSlack(t)
	n := newBot(t, f, nil)
	x := sequence()[1]
	x.State = notifiers.State{}
	if _, err := n.Notify(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	c := f.Calls()[0]
	if c.Method != "chat.postMessage" || c.ThreadTS != "" || x.State.Get(StateTS) == "" {
		t.Errorf("first call %+v, state %v", c, x.State)
	}
}

func TestNotifyInvalid(t *testing.T) {
	f := newFakeSlack(t)
	n := newBot(t, f, nil)
	retry, err := n.Notify(context.Background(), &notifiers.Notification{ID: "x"})
	if retry || err == nil {
		t.Errorf("invalid notification: retry=%v err=%v", retry, err)
	}
}

// blocksJSON marshals blocks without HTML escaping, as a reader sees them.
func blocksJSON(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return unescapeHTML(b.Bytes())
}

// unescapeHTML undoes encoding/json's HTML escaping (blocks marshal
// themselves with it); the JSON stays valid.
func unescapeHTML(b []byte) []byte {
	return []byte(strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(b)))
}

// TestChartOpenedAt: the chart source is told when the incident opened,
// on the open (its own time) and on an update (the time kept in the
// state), so the chart marks one onset throughout.
func TestChartOpenedAt(t *testing.T) {
	f := newFakeSlack(t)
	var opened []time.Time
	n, err := New(botConfig(f), Options{Chart: func(_ context.Context, _ *verdict.Verdict, at time.Time) ([]byte, error) {
		opened = append(opened, at)
		return tinyPNG(), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ns := sequence()
	deliver(t, n, ns[:2])
	if len(opened) != 2 || !opened[0].Equal(ns[0].CreatedAt) || !opened[1].Equal(ns[0].CreatedAt.Truncate(time.Second)) {
		t.Errorf("charts told opened %v, want %s twice", opened, ns[0].CreatedAt)
	}
}

// TestPredictedGolden keeps the message of a verdict with predictions
// (why --predict) in testdata/predicted.golden.json; without them the
// message has no fixes section.
func TestPredictedGolden(t *testing.T) {
	m := Blocks(notifytest.Predicted(), RenderOptions{Kind: KindParent, IncidentID: "inc-1"})
	b, err := json.MarshalIndent(m.Blocks, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "predicted.golden.json", append(unescapeHTML(b), '\n'))
	if !strings.Contains(string(b), render.PredictedHeading) || !strings.Contains(string(b), "poor fit") {
		t.Errorf("no predictions section:\n%s", b)
	}
	b, err = json.Marshal(Blocks(notifytest.Anomaly(), RenderOptions{Kind: KindParent}).Blocks)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), render.PredictedHeading) {
		t.Errorf("predictions section without predictions:\n%s", b)
	}
	// nothing predicted: the message says why
	v := notifytest.Anomaly()
	v.Predicted = &verdict.Predicted{Missing: "no prediction: missing series kv_per_running"}
	if s := predictionsText(v); !strings.Contains(s, "missing series kv_per_running") {
		t.Errorf("missing series not said: %q", s)
	}
	// no fix predicted to help: said before the fixes
	v = notifytest.Predicted()
	v.Predicted.NoneHelps = "no catalogued fix is predicted to help: …"
	if s := predictionsText(v); !strings.Contains(s, "no catalogued fix is predicted to help") ||
		strings.Index(s, "no catalogued fix") > strings.Index(s, "replicas×2") {
		t.Errorf("none-helps not said before the fixes: %q", s)
	}
}
