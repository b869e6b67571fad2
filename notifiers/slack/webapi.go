package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"
)

// webAPI makes the bot's three kinds of Web API call (chat.postMessage,
// chat.update, the files upload) as slack-go's Client makes them (v0.36.0:
// the same form fields, the same multipart upload, the same error values),
// without linking that Client: its hundreds of methods, one per API
// method, stayed in the binary (1.6 MB of the daemon's text, rodata and
// pclntab; text/template's method lookups keep every exported method of a
// linked type). Block Kit types, webhooks and slash commands still come
// from slack-go.
type webAPI struct {
	token    string
	endpoint string // the API base URL, ending in "/"
	hc       *http.Client
}

// chatResponse is the answer to chat.postMessage and chat.update.
type chatResponse struct {
	Channel   string `json:"channel"`
	Timestamp string `json:"ts"`
	slack.SlackResponse
}

// postMessage posts text and blocks (a thread reply when threadTS is set),
// link unfurling off, and returns the channel id and the message's ts.
func (a *webAPI) postMessage(ctx context.Context, channel, threadTS, text string, blocks []slack.Block) (string, string, error) {
	values := url.Values{"token": {a.token}, "channel": {channel}}
	values.Add("text", text)
	values.Set("unfurl_links", "false")
	if threadTS != "" {
		values.Set("thread_ts", threadTS)
	}
	return a.chat(ctx, "chat.postMessage", values, blocks)
}

// updateMessage replaces the text and blocks of the message at ts.
func (a *webAPI) updateMessage(ctx context.Context, channel, ts, text string, blocks []slack.Block) error {
	values := url.Values{"token": {a.token}, "channel": {channel}}
	values.Add("ts", ts)
	values.Add("text", text)
	_, _, err := a.chat(ctx, "chat.update", values, blocks)
	return err
}

func (a *webAPI) chat(ctx context.Context, method string, values url.Values, blocks []slack.Block) (string, string, error) {
	if blocks == nil {
		blocks = []slack.Block{} // "[]": no blocks is a message without them, as slack-go sends it
	}
	b, err := json.Marshal(blocks)
	if err != nil {
		return "", "", err
	}
	values.Set("blocks", string(b))
	var resp chatResponse
	if err := a.postForm(ctx, method, values, &resp); err != nil {
		return "", "", err
	}
	return resp.Channel, resp.Timestamp, resp.Err()
}

// upload is one file shared into a thread.
type upload struct {
	Content                  []byte
	Filename, Title, AltText string
	Channel, ThreadTS        string
}

// uploadFile shares a file in three steps: files.getUploadURLExternal,
// the bytes to the URL it returns, files.completeUploadExternal.
func (a *webAPI) uploadFile(ctx context.Context, f upload) error {
	if f.Filename == "" {
		return fmt.Errorf("file.upload.v2: filename cannot be empty")
	}
	if len(f.Content) == 0 {
		return fmt.Errorf("file.upload.v2: file size cannot be 0")
	}
	values := url.Values{"token": {a.token}, "filename": {f.Filename}, "length": {strconv.Itoa(len(f.Content))}}
	if f.AltText != "" {
		values.Add("alt_txt", f.AltText)
	}
	var u slack.GetUploadURLExternalResponse
	err := a.postForm(ctx, "files.getUploadURLExternal", values, &u)
	if err == nil {
		err = u.Err()
	}
	if err != nil {
		return fmt.Errorf("GetUploadURLExternal: %w", err)
	}
	if err := a.uploadTo(ctx, u.UploadURL, f.Filename, f.Content); err != nil {
		return fmt.Errorf("UploadToURL: %w", err)
	}
	files, err := json.Marshal([]slack.FileSummary{{ID: u.FileID, Title: f.Title}})
	if err != nil {
		return err
	}
	values = url.Values{"token": {a.token}, "files": {string(files)}}
	if f.Channel != "" {
		values.Add("channel_id", f.Channel)
	}
	if f.ThreadTS != "" {
		values.Add("thread_ts", f.ThreadTS)
	}
	var c slack.CompleteUploadExternalResponse
	err = a.postForm(ctx, "files.completeUploadExternal", values, &c)
	if err == nil {
		err = c.Err()
	}
	if err != nil {
		return fmt.Errorf("CompleteUploadExternal: %w", err)
	}
	if len(c.Files) != 1 {
		return fmt.Errorf("file.upload.v2: something went wrong; received %d files instead of 1", len(c.Files))
	}
	return nil
}

// uploadTo sends the file as the multipart field "file" with the token as
// a bearer token, to an https Slack URL or the API's own host only.
func (a *webAPI) uploadTo(ctx context.Context, rawURL, filename string, content []byte) error {
	if err := a.mayReceiveToken(rawURL); err != nil {
		return err
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	w, err := mw.CreateFormFile("file", filename)
	if err != nil {
		return err
	}
	if _, err := w.Write(content); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, &body)
	if err != nil {
		return err
	}
	req.Header.Add("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+a.token)
	return a.do(req, nil)
}

// slackDomains are the hosts (and their subdomains) an upload URL may be
// on, as slack-go lists them.
var slackDomains = []string{"slack.com", "slack-gov.com"}

func (a *webAPI) mayReceiveToken(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	api, err := url.Parse(a.endpoint)
	if err != nil {
		return err
	}
	if u.Scheme == "https" {
		host := strings.ToLower(u.Hostname())
		for _, d := range slackDomains {
			if host == d || strings.HasSuffix(host, "."+d) {
				return nil
			}
		}
	}
	if api.Host != "" && u.Scheme == api.Scheme && strings.EqualFold(u.Host, api.Host) {
		return nil
	}
	return fmt.Errorf("refusing to send the token to %q: not an https Slack URL or the API URL", rawURL)
}

// postForm posts values to the API method and decodes the answer into dst.
func (a *webAPI) postForm(ctx context.Context, method string, values url.Values, dst any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.endpoint+method, strings.NewReader(values.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return a.do(req, dst)
}

// do sends req and decodes a 200 answer into dst (nil: not read). A 429
// with Retry-After is a *slack.RateLimitedError, any other status but 200
// a slack.StatusCodeError, as slack-go returns them.
func (a *webAPI) do(req *http.Request, dst any) error {
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" {
		retry, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
		if err != nil {
			return err
		}
		return &slack.RateLimitedError{RetryAfter: time.Duration(retry) * time.Second}
	}
	if resp.StatusCode != http.StatusOK {
		return slack.StatusCodeError{Code: resp.StatusCode, Status: resp.Status}
	}
	if dst == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(dst)
}
