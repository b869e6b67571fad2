//go:build !(cgo && linux)

package gpu

import (
	"context"
	"errors"
	"testing"

	"github.com/whyslow/whyslow/collectors"
)

func TestStub(t *testing.T) {
	if NVMLBuilt {
		t.Fatal("stub build says NVML is built")
	}
	c, err := New(Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Read(context.Background())
	if !errors.Is(err, collectors.ErrNoData) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrNoData and ErrUnavailable", err)
	}
	if want := "no NVML: NVML not available in this build (CGO_ENABLED=0)"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}
