package slack

import "testing"

// TestUploadURLMayReceiveToken: the upload step sends the bot token to the
// URL files.getUploadURLExternal returned, so only an https Slack host or
// the configured API's own host may receive it.
func TestUploadURLMayReceiveToken(t *testing.T) {
	a := &webAPI{endpoint: "http://127.0.0.1:8089/api/"}
	for url, ok := range map[string]bool{
		"https://files.slack.com/upload/v1/abc":  true,
		"https://slack.com/upload":               true,
		"https://files.slack-gov.com/upload/v1/": true,
		"http://127.0.0.1:8089/upload/F1":        true,
		"http://files.slack.com/upload/v1/abc":   false, // not https
		"https://slack.com.evil.example/upload":  false,
		"https://evilslack.com/upload":           false,
		"http://127.0.0.1:9999/upload/F1":        false, // another port than the API's
		"https://127.0.0.1:8089/upload/F1":       false, // another scheme than the API's
	} {
		if err := a.mayReceiveToken(url); (err == nil) != ok {
			t.Errorf("%s: error %v, want allowed %v", url, err, ok)
		}
	}
}
