package format

import (
	"math"
	"testing"
	"time"
)

// TestSeconds pins the one duration format: the forms issue 25 found in one
// verdict ("77.45s", "1m17s", "4874s", "4h46m56s") all come out one way.
func TestSeconds(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want string
	}{
		{0, "0 s"}, {0.00042, "420 µs"}, {0.0123, "12.3 ms"}, {0.0431, "43.1 ms"}, {0.9997, "1 s"},
		{2.345, "2.35 s"}, {9.28, "9.28 s"}, {59.99, "1m"}, {77.45, "1m17s"}, {120, "2m"}, {250, "4m10s"},
		{470, "7m50s"}, {4874, "1h21m"}, {17216, "4h47m"}, {3600, "1h"}, {3 * 86400, "3d"}, {3*86400 + 4*3600, "3d4h"},
		{-77.45, "-1m17s"}, {-0.5, "-500 ms"}, {math.NaN(), "n/a"},
	} {
		if got := Seconds(tt.in); got != tt.want {
			t.Errorf("Seconds(%g) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := Duration(5 * time.Minute); got != "5m" {
		t.Errorf("Duration(5m) = %q", got)
	}
}

// TestDurationExtremes: the ends of time.Duration and seconds beyond it
// render without overflow (FuzzText found Duration(MinInt64) recursing).
func TestDurationExtremes(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Duration(math.MinInt64), "-106751d23h"}, // Round saturates
		{Duration(math.MaxInt64), "106751d23h"},
		{Seconds(1e300), "1.16e+295 d"},
		{Seconds(-1e12), "-1.16e+07 d"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestRatioNumber(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Ratio(7.7712), "×7.77"}, {Ratio(2015.6), "×2016"}, {Ratio(0.625), "×0.625"}, {Ratio(math.NaN()), "n/a"},
		{Number(12345.6), "12346"}, {Number(0.01234), "0.0123"}, {Number(100), "100"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
