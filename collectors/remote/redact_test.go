package remote

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/testbed/secrettest"
)

// TestQueryTokenNeverShown is finding 6 of issue 14 (the --prometheus
// part): a ?token= in the server URL appeared in every error, and a server
// that echoes the request's headers leaked the basic-auth credentials.
func TestQueryTokenNeverShown(t *testing.T) {
	qtok, pw := secrettest.Secret("qtok"), secrettest.Secret("basicpw")
	sc := secrettest.New(t, qtok, "me:"+pw)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "proxy error for %s: headers %v", r.URL, r.Header)
	}))
	defer echo.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	for _, tc := range []struct{ name, url string }{
		{"token in query, echoing server", echo.URL + "/?token=" + qtok},
		{"token in query, down", downURL + "/?token=" + qtok},
		{"basic in URL, echoing server", strings.Replace(echo.URL, "http://", "http://me:"+pw+"@", 1)},
		{"bad URL", "http://me:" + pw + "@h:port/?token=" + qtok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Options{URL: tc.url, Timeout: time.Second})
			if err != nil {
				sc.Error("new", err)
				return
			}
			sc.String("URL()", c.URL())
			_, _, err = c.Query(context.Background(), "up", t0)
			if err == nil {
				t.Fatal("want an error")
			}
			sc.Error("query", err)
			_, _, err = c.QueryRange(context.Background(), "up", t0, t0.Add(time.Minute), time.Second)
			sc.Error("query range", err)
		})
	}
}
