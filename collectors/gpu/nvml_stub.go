//go:build !(cgo && linux)

package gpu

// NVMLBuilt reports whether this build links go-nvml (cgo on Linux).
const NVMLBuilt = false

// stubMessage is what Init says in a build without go-nvml.
const stubMessage = "NVML not available in this build (CGO_ENABLED=0)"

// NewNVML returns a Lib whose Init always fails with KindUnavailable: this
// build has no go-nvml (it needs cgo on Linux).
func NewNVML() Lib { return stubLib{} }

// stubLib is the Lib of builds without go-nvml. Only Init and Shutdown are
// ever called on it; the others fail the same way, defensively.
type stubLib struct{}

func stubErr(op string) error {
	return &Error{Op: op, Message: stubMessage, Kind: KindUnavailable}
}

func (stubLib) Init() error                    { return stubErr("Init") }
func (stubLib) Shutdown() error                { return nil }
func (stubLib) DriverVersion() (string, error) { return "", stubErr("SystemGetDriverVersion") }
func (stubLib) DeviceCount() (int, error)      { return 0, stubErr("DeviceGetCount") }
func (stubLib) DeviceByIndex(int) (Device, error) {
	return nil, stubErr("DeviceGetHandleByIndex")
}
func (stubLib) GPMSampleAlloc() (GPMSample, error) { return nil, stubErr("GpmSampleAlloc") }
func (stubLib) GPMMetrics(GPMSample, GPMSample, []GPMMetric) ([]GPMResult, error) {
	return nil, stubErr("GpmMetricsGet")
}
