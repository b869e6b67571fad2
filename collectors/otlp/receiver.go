package otlp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // OTLP/gRPC clients may gzip
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/whyslow/whyslow/internal/decompress"
	"github.com/whyslow/whyslow/internal/httplimit"
	"github.com/whyslow/whyslow/span"
)

// Sink receives converted spans. It must not fail: a full store evicts.
// It takes ownership of the spans' names and Resource slices; it must copy
// what it keeps of their Attrs (slices and strings), which are only valid
// during the call.
type Sink interface {
	Append(spans []span.Span)
}

// Defaults for a zero Options.
const (
	DefaultMaxRequestBytes = 16 << 20
	// DefaultBodyBudget bounds the request bytes all OTLP/HTTP uploads
	// together hold while their bodies arrive.
	DefaultBodyBudget = 64 << 20
	// DefaultMaxConns bounds the open connections of each receiver.
	DefaultMaxConns = 1024
	// DefaultMaxConnsPerClient bounds those of one remote IP: an exporter
	// holds one or two, a node's collector a few; 64 leaves 15/16 of the
	// slots to others whatever one address does.
	DefaultMaxConnsPerClient = 64
	// TracesPath is the OTLP/HTTP traces path.
	TracesPath = "/v1/traces"
)

const (
	contentProtobuf = "application/x-protobuf"
	contentJSON     = "application/json"
	retryAfter      = time.Second
)

// Options configures a Receiver; zero values get defaults.
type Options struct {
	// HTTPAddr is the OTLP/HTTP listen address (":4318"); empty disables it.
	HTTPAddr string
	// GRPCAddr is the OTLP/gRPC listen address (":4317"); empty disables it.
	GRPCAddr string
	// Sink receives the spans (required).
	Sink Sink
	// Registerer receives the receiver's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// MaxRequestBytes bounds a request body, before and after gzip
	// (default DefaultMaxRequestBytes).
	MaxRequestBytes int64
	// MaxInFlight bounds exports decoded at once; beyond it clients get a
	// retryable 503 / UNAVAILABLE (default 4×GOMAXPROCS). A slot is taken
	// once the body has arrived, so slow uploads never hold one.
	MaxInFlight int
	// BodyBudget bounds the bytes of the OTLP/HTTP bodies being received at
	// once (default DefaultBodyBudget); beyond it clients get 503.
	BodyBudget int64
	// HTTP bounds the OTLP/HTTP server: timeouts (a body must arrive within
	// ReadTimeout, default 30s), header size, open connections (default
	// DefaultMaxConns). The gRPC server takes MaxConns and uses
	// ReadHeaderTimeout as its connection handshake timeout.
	HTTP httplimit.Limits
	// MaxConnsPerClient bounds the open connections of one remote IP on
	// each receiver (default DefaultMaxConnsPerClient). When a receiver is
	// full, a connection that has not authenticated and is not being
	// served (the least recently active first) is closed for the new one.
	MaxConnsPerClient int
	// Token, when set and returning a non-empty token, requires every export
	// to carry "Authorization: Bearer TOKEN" (the header OTel exporters send
	// with OTEL_EXPORTER_OTLP_HEADERS): 401 / UNAUTHENTICATED otherwise.
	Token func() string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Receiver serves OTLP/HTTP and OTLP/gRPC trace exports.
type Receiver struct {
	opts     Options
	log      *slog.Logger
	inFlight chan struct{}
	budget   *httplimit.Budget
	spanPool sync.Pool
	decoders sync.Pool // *Decoder
	gzPool   sync.Pool

	received  *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	failed    *prometheus.CounterVec
	connsLost *prometheus.CounterVec

	httpLn, grpcLn net.Listener
	grpcBounded    net.Listener // grpcLn bounded (httplimit), for MarkAddr
	httpSrv        *http.Server
	grpcSrv        *grpc.Server
}

// New returns a receiver that is not yet listening.
func New(opts Options) (*Receiver, error) {
	if opts.Sink == nil {
		return nil, errors.New("otlp receiver: no sink")
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 4 * runtime.GOMAXPROCS(0)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BodyBudget <= 0 {
		opts.BodyBudget = DefaultBodyBudget
	}
	if opts.HTTP.MaxConns <= 0 {
		opts.HTTP.MaxConns = DefaultMaxConns
	}
	if opts.MaxConnsPerClient <= 0 {
		opts.MaxConnsPerClient = DefaultMaxConnsPerClient
	}
	opts.HTTP = opts.HTTP.WithDefaults()
	r := &Receiver{
		opts:     opts,
		log:      opts.Logger.With("collector", "otlp"),
		inFlight: make(chan struct{}, opts.MaxInFlight),
		budget:   httplimit.NewBudget(opts.BodyBudget),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_otlp_spans_received_total", Help: "Spans accepted by the OTLP receivers.",
		}, []string{"transport"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_otlp_spans_rejected_total", Help: "Spans the OTLP receivers refused, by reason.",
		}, []string{"reason"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_otlp_requests_failed_total", Help: "Export requests refused whole, by transport and reason.",
		}, []string{"transport", "reason"}),
		connsLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_otlp_connections_rejected_total",
			Help: "Connections closed by the receiver's bounds, by transport and reason (full: the most were open and all busy; per_client: the remote IP had its most open; evicted: an unauthenticated, inactive one closed for a new one).",
		}, []string{"transport", "reason"}),
	}
	for _, t := range []string{"http", "grpc"} {
		r.received.WithLabelValues(t)
		for _, reason := range []string{httplimit.RejectFull, httplimit.RejectPerClient, httplimit.RejectEvicted} {
			r.connsLost.WithLabelValues(t, reason)
		}
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{r.received, r.rejected, r.failed, r.connsLost} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("otlp receiver: register metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Listen binds the configured addresses, so that HTTPAddr and GRPCAddr
// report the real ports (useful with ":0").
func (r *Receiver) Listen() error {
	if r.opts.HTTPAddr != "" {
		ln, err := net.Listen("tcp", r.opts.HTTPAddr)
		if err != nil {
			return fmt.Errorf("otlp http listen %s: %w", r.opts.HTTPAddr, err)
		}
		r.httpLn = ln
	}
	if r.opts.GRPCAddr != "" {
		ln, err := net.Listen("tcp", r.opts.GRPCAddr)
		if err != nil {
			if r.httpLn != nil {
				r.httpLn.Close()
			}
			return fmt.Errorf("otlp grpc listen %s: %w", r.opts.GRPCAddr, err)
		}
		r.grpcLn = ln
	}
	return nil
}

// HTTPAddr returns the bound OTLP/HTTP address, or "" when disabled.
func (r *Receiver) HTTPAddr() string {
	if r.httpLn == nil {
		return ""
	}
	return r.httpLn.Addr().String()
}

// GRPCAddr returns the bound OTLP/gRPC address, or "" when disabled.
func (r *Receiver) GRPCAddr() string {
	if r.grpcLn == nil {
		return ""
	}
	return r.grpcLn.Addr().String()
}

// Run listens (unless Listen was called) and serves until ctx is done, then
// shuts both servers down gracefully.
func (r *Receiver) Run(ctx context.Context) error {
	if r.httpLn == nil && r.grpcLn == nil {
		if err := r.Listen(); err != nil {
			return err
		}
	}
	errc := make(chan error, 2)
	if r.httpLn != nil {
		mux := http.NewServeMux()
		mux.Handle(TracesPath, r.Handler())
		r.httpSrv = httplimit.Server(mux, r.opts.HTTP)
		r.httpSrv.ConnContext = httplimit.ConnContext
		ln := httplimit.ListenerWith(r.httpLn, r.listenerOptions("http"))
		go func() { errc <- r.httpSrv.Serve(ln) }()
		r.log.Info("OTLP/HTTP receiver listening", "addr", r.HTTPAddr(), "auth", r.authState())
	}
	if r.grpcLn != nil {
		r.grpcSrv = grpc.NewServer(r.grpcOptions()...)
		coltracepb.RegisterTraceServiceServer(r.grpcSrv, grpcService{r: r})
		r.grpcBounded = httplimit.ListenerWith(r.grpcLn, r.listenerOptions("grpc"))
		go func() { errc <- r.grpcSrv.Serve(r.grpcBounded) }()
		r.log.Info("OTLP/gRPC receiver listening", "addr", r.GRPCAddr(), "auth", r.authState())
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r.httpSrv != nil {
		r.httpSrv.Shutdown(shutCtx)
	}
	if r.grpcSrv != nil {
		done := make(chan struct{})
		go func() { r.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-shutCtx.Done():
			r.grpcSrv.Stop()
		}
	}
	if err != nil {
		return fmt.Errorf("otlp receiver: %w", err)
	}
	return nil
}

// listenerOptions bound a receiver's connections: in all, per client, and
// stalled ones closed for new ones when full.
func (r *Receiver) listenerOptions(transport string) httplimit.ListenerOptions {
	return httplimit.ListenerOptions{MaxConns: r.opts.HTTP.MaxConns, MaxPerClient: r.opts.MaxConnsPerClient, Evict: true,
		OnReject: func(reason string) { r.connsLost.WithLabelValues(transport, reason).Inc() }}
}

// grpcOptions bound the gRPC server as httplimit bounds the HTTP one: the
// message size, a handshake timeout, streams per connection, fixed flow
// control windows (no growth to 16 MiB per stream), and connections that
// are closed after a while, so a stalled upload cannot live forever.
func (r *Receiver) grpcOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(r.opts.MaxRequestBytes)),
		grpc.ConnectionTimeout(r.opts.HTTP.ReadHeaderTimeout),
		grpc.MaxConcurrentStreams(16),
		grpc.InitialWindowSize(256 << 10),
		grpc.InitialConnWindowSize(1 << 20),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     r.opts.HTTP.IdleTimeout,
			MaxConnectionAge:      5 * time.Minute,
			MaxConnectionAgeGrace: r.opts.HTTP.ReadTimeout,
		}),
		grpc.UnaryInterceptor(r.grpcAuth),
	}
}

// token is the bearer token exports must carry, "" for none.
func (r *Receiver) token() string {
	if r.opts.Token == nil {
		return ""
	}
	return r.opts.Token()
}

func (r *Receiver) authState() string {
	if r.token() != "" {
		return "bearer token"
	}
	return "none"
}

// grpcAuth checks the bearer token in the "authorization" metadata.
func (r *Receiver) grpcAuth(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if tok := r.token(); tok != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		if vs := md.Get("authorization"); len(vs) == 0 || !httplimit.BearerOK(vs[0], tok) {
			r.failed.WithLabelValues("grpc", "unauthorized").Inc()
			return nil, status.Error(codes.Unauthenticated, "missing or wrong bearer token")
		}
	}
	// Authenticated and being served: a full receiver closes others first.
	if p, ok := peer.FromContext(ctx); ok {
		defer httplimit.MarkAddr(r.grpcBounded, p.Addr)()
	}
	return next(ctx, req)
}

// acquire takes an in-flight slot without waiting.
func (r *Receiver) acquire() bool {
	select {
	case r.inFlight <- struct{}{}:
		return true
	default:
		return false
	}
}

func (r *Receiver) release() { <-r.inFlight }

// ingest converts and stores one decoded request. It returns the partial
// success, or a *FieldError for a malformed request.
func (r *Receiver) ingest(req *coltracepb.ExportTraceServiceRequest, transport string) (*coltracepb.ExportTraceServiceResponse, error) {
	bufp := r.getSpans()
	spans, rej, err := Convert((*bufp)[:0], req.ResourceSpans)
	return r.store(bufp, spans, rej, err, transport)
}

// ingestProtobuf decodes an OTLP/HTTP protobuf body straight into spans and
// stores them, as ingest does a decoded request.
func (r *Receiver) ingestProtobuf(body []byte) (*coltracepb.ExportTraceServiceResponse, error) {
	d, _ := r.decoders.Get().(*Decoder)
	if d == nil {
		d = new(Decoder)
	}
	bufp := r.getSpans()
	defer func() { d.Recycle(); r.decoders.Put(d) }()
	spans, rej, err := d.Decode((*bufp)[:0], body)
	var fe *FieldError
	if errors.As(err, &fe) {
		r.rejected.WithLabelValues("malformed").Add(float64(d.Seen()))
	}
	return r.store(bufp, spans, rej, err, "http")
}

func (r *Receiver) getSpans() *[]span.Span {
	bufp, _ := r.spanPool.Get().(*[]span.Span)
	if bufp == nil {
		bufp = new([]span.Span)
	}
	return bufp
}

// store hands converted spans to the sink and returns the partial success;
// a conversion error stores nothing.
func (r *Receiver) store(bufp *[]span.Span, spans []span.Span, rej Rejected, err error, transport string) (*coltracepb.ExportTraceServiceResponse, error) {
	if err != nil {
		r.putSpans(bufp, spans)
		return nil, err
	}
	if len(spans) > 0 {
		r.opts.Sink.Append(spans)
		r.received.WithLabelValues(transport).Add(float64(len(spans)))
	}
	r.putSpans(bufp, spans)
	resp := &coltracepb.ExportTraceServiceResponse{}
	if rej.Spans > 0 {
		r.rejected.WithLabelValues("invalid_span").Add(float64(rej.Spans))
		resp.PartialSuccess = &coltracepb.ExportTracePartialSuccess{RejectedSpans: rej.Spans, ErrorMessage: rej.Message}
	}
	return resp, nil
}

func (r *Receiver) putSpans(bufp *[]span.Span, spans []span.Span) {
	clear(spans) // drop references to attribute slices now owned by the sink
	if cap(spans) > 1<<16 {
		return
	}
	*bufp = spans[:0]
	r.spanPool.Put(bufp)
}

func countSpans(req *coltracepb.ExportTraceServiceRequest) int {
	n := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	return n
}

// Handler returns the OTLP/HTTP handler for POST /v1/traces.
func (r *Receiver) Handler() http.Handler { return http.HandlerFunc(r.serveHTTP) }

// httpError is a refused request: status, message, and the metric reason.
type httpError struct {
	code   int
	reason string
	msg    string
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	ctype := contentProtobuf
	if mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err == nil && mt == contentJSON {
		ctype = contentJSON
	}
	resp, herr := r.handleHTTP(w, req)
	if herr != nil {
		r.failed.WithLabelValues("http", herr.reason).Inc()
		if herr.code == http.StatusServiceUnavailable || herr.code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
		}
		if herr.code == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodPost)
		}
		if herr.code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="whyslow"`)
		}
		// A proto string must be valid UTF-8 or the status does not encode.
		herr.msg = strings.ToValidUTF8(herr.msg, "\uFFFD")
		r.log.Debug("Refused OTLP/HTTP export", "code", herr.code, "reason", herr.reason, "err", herr.msg)
		writeMessage(w, ctype, herr.code, &statuspb.Status{Code: int32(grpcCodeFor(herr.code)), Message: herr.msg})
		return
	}
	writeMessage(w, ctype, http.StatusOK, resp)
}

func grpcCodeFor(httpCode int) codes.Code {
	switch httpCode {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		return codes.Unavailable
	case http.StatusRequestEntityTooLarge:
		return codes.ResourceExhausted
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusRequestTimeout:
		return codes.DeadlineExceeded
	}
	return codes.InvalidArgument
}

func writeMessage(w http.ResponseWriter, ctype string, code int, m proto.Message) {
	var b []byte
	var err error
	if ctype == contentJSON {
		b, err = protojson.Marshal(m)
	} else {
		b, err = proto.Marshal(m)
	}
	if err != nil {
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	w.Write(b)
}

func (r *Receiver) handleHTTP(w http.ResponseWriter, req *http.Request) (*coltracepb.ExportTraceServiceResponse, *httpError) {
	if req.Method != http.MethodPost {
		return nil, &httpError{http.StatusMethodNotAllowed, "method", "only POST is allowed on " + TracesPath}
	}
	tok := r.token()
	if tok != "" && !httplimit.BearerOK(req.Header.Get("Authorization"), tok) {
		return nil, &httpError{http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token"}
	}
	if tok != "" {
		// Authenticated: a full receiver closes others' connections first.
		httplimit.MarkTrusted(req.Context())
	}
	mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil || (mt != contentProtobuf && mt != contentJSON) {
		return nil, &httpError{http.StatusUnsupportedMediaType, "content_type",
			fmt.Sprintf("unsupported content type %q: want %s or %s", req.Header.Get("Content-Type"), contentProtobuf, contentJSON)}
	}
	// The body first: a slow upload must not hold a decoding slot.
	body, release, herr := r.readBody(w, req)
	defer release()
	if herr != nil {
		return nil, herr
	}
	// Being served from here on: a full receiver does not close it. A
	// stalled body (above) is not protected.
	defer httplimit.MarkBusy(req.Context())()
	if tok == "" {
		// No token to show: a whole request read is the proof of a client.
		httplimit.MarkTrusted(req.Context())
	}
	if !r.acquire() {
		return nil, &httpError{http.StatusServiceUnavailable, "overloaded", "too many exports in flight; retry later"}
	}
	defer r.release()
	var resp *coltracepb.ExportTraceServiceResponse
	if mt == contentJSON {
		var er *coltracepb.ExportTraceServiceRequest
		if er, err = DecodeJSON(body, IDHex); err == nil {
			if resp, err = r.ingest(er, "http"); err != nil {
				r.rejected.WithLabelValues("malformed").Add(float64(countSpans(er)))
			}
		}
	} else {
		resp, err = r.ingestProtobuf(body)
	}
	if err != nil {
		return nil, &httpError{http.StatusBadRequest, "malformed", err.Error()}
	}
	return resp, nil
}

// readBody reads the body, gunzipping it when asked, within the size limit
// (before and after gzip, and the decompression ratio) and the body budget.
// release returns the body's bytes to the budget.
func (r *Receiver) readBody(w http.ResponseWriter, req *http.Request) ([]byte, func(), *httpError) {
	limit := r.opts.MaxRequestBytes
	tooLarge := &httpError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request body over %d bytes", limit)}
	none := func() {}
	if req.ContentLength > limit {
		return nil, none, tooLarge
	}
	var src io.Reader = http.MaxBytesReader(w, req.Body, limit)
	switch enc := req.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, _ := r.gzPool.Get().(*decompress.Reader)
		var err error
		lim := decompress.Limits{MaxBytes: limit}
		if zr == nil {
			zr, err = decompress.NewGzip(src, lim)
		} else {
			err = zr.Reset(src, lim)
		}
		if err != nil {
			if herr := r.bodyError(err, tooLarge); herr != nil {
				return nil, none, herr
			}
			return nil, none, &httpError{http.StatusBadRequest, "malformed", "invalid gzip body: " + err.Error()}
		}
		defer r.gzPool.Put(zr)
		src = zr
	default:
		return nil, none, &httpError{http.StatusUnsupportedMediaType, "content_encoding", fmt.Sprintf("unsupported content encoding %q: want gzip or none", enc)}
	}
	body, release, err := httplimit.ReadBody(src, limit, r.budget)
	if err != nil {
		if herr := r.bodyError(err, tooLarge); herr != nil {
			return nil, none, herr
		}
		return nil, none, &httpError{http.StatusBadRequest, "malformed", err.Error()}
	}
	return body, release, nil
}

// bodyError maps the bounds' errors to a refusal; nil for other errors.
func (r *Receiver) bodyError(err error, tooLarge *httpError) *httpError {
	var mbe *http.MaxBytesError
	var le *decompress.LimitError
	switch {
	case errors.As(err, &le) && le.Ratio:
		return &httpError{http.StatusRequestEntityTooLarge, "too_large", le.Error()}
	case errors.As(err, &mbe), errors.Is(err, httplimit.ErrTooLarge), errors.Is(err, decompress.ErrTooLarge):
		return tooLarge
	case errors.Is(err, httplimit.ErrBusy):
		return &httpError{http.StatusServiceUnavailable, "overloaded", "too many upload bytes in flight; retry later"}
	case errors.Is(err, httplimit.ErrTimeout):
		return &httpError{http.StatusRequestTimeout, "timeout", "request body not received in time"}
	}
	return nil
}

type grpcService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

// Export implements the OTLP TraceService.
func (g grpcService) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r := g.r
	if !r.acquire() {
		r.failed.WithLabelValues("grpc", "overloaded").Inc()
		st := status.New(codes.Unavailable, "too many exports in flight; retry later")
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)}); err == nil {
			st = d
		}
		return nil, st.Err()
	}
	defer r.release()
	resp, err := r.ingest(req, "grpc")
	if err != nil {
		r.failed.WithLabelValues("grpc", "malformed").Inc()
		r.rejected.WithLabelValues("malformed").Add(float64(countSpans(req)))
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return resp, nil
}
