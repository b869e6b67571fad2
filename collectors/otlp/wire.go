package otlp

import (
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/whyslow/whyslow/span"
)

// Field numbers of the messages the Decoder walks, from opentelemetry-proto
// v1.x: opentelemetry/proto/collector/trace/v1/trace_service.proto,
// opentelemetry/proto/trace/v1/trace.proto,
// opentelemetry/proto/resource/v1/resource.proto and
// opentelemetry/proto/common/v1/common.proto.
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   = 1 // ResourceSpans.resource
	fResourceSpansScopeSpans = 2 // ResourceSpans.scope_spans
	fResourceSpansSchemaURL  = 3 // ResourceSpans.schema_url

	fResourceAttributes = 1 // Resource.attributes

	fScopeSpansScope     = 1 // ScopeSpans.scope
	fScopeSpansSpans     = 2 // ScopeSpans.spans
	fScopeSpansSchemaURL = 3 // ScopeSpans.schema_url

	fSpanTraceID      = 1  // Span.trace_id
	fSpanSpanID       = 2  // Span.span_id
	fSpanTraceState   = 3  // Span.trace_state
	fSpanParentSpanID = 4  // Span.parent_span_id
	fSpanName         = 5  // Span.name
	fSpanKind         = 6  // Span.kind
	fSpanStart        = 7  // Span.start_time_unix_nano
	fSpanEnd          = 8  // Span.end_time_unix_nano
	fSpanAttributes   = 9  // Span.attributes
	fSpanEvents       = 11 // Span.events
	fSpanLinks        = 13 // Span.links
	fSpanStatus       = 15 // Span.status

	fStatusMessage = 2 // Status.message
	fStatusCode    = 3 // Status.code

	fKeyValueKey   = 1 // KeyValue.key
	fKeyValueValue = 2 // KeyValue.value

	fAnyString = 1 // AnyValue.string_value
	fAnyBool   = 2 // AnyValue.bool_value
	fAnyInt    = 3 // AnyValue.int_value
	fAnyDouble = 4 // AnyValue.double_value
	// Fields 5 (array_value), 6 (kvlist_value), 7 (bytes_value) and 8
	// (string_value_strindex) are rare: decoded by proto.Unmarshal.
	fAnyFirstComplex = 5
	fAnyLastComplex  = 7
	fAnyStrindex     = 8
)

const (
	// Repeated strings up to keepMaxLen bytes (attribute keys, span names,
	// resource values) are decoded once per Decoder; the table stops
	// growing at keepMaxEntries.
	keepMaxLen     = 64
	keepMaxEntries = 1024
	// maxDepth is proto.Unmarshal's default recursion limit.
	maxDepth = protowire.DefaultRecursionLimit
)

// Descriptors of the messages the Decoder checks without keeping anything
// from them: proto.Unmarshal would reject them when malformed.
var (
	scopeDesc    = (&commonpb.InstrumentationScope{}).ProtoReflect().Descriptor()
	eventDesc    = (&tracepb.Span_Event{}).ProtoReflect().Descriptor()
	linkDesc     = (&tracepb.Span_Link{}).ProtoReflect().Descriptor()
	resourceDesc = (&resourcepb.Resource{}).ProtoReflect().Descriptor()
)

// A Decoder decodes OTLP protobuf ExportTraceServiceRequest bodies straight
// into span.Span values, the same spans (and the same errors, in kind) as
// proto.Unmarshal followed by Convert, without building the request's
// messages. Names and resources are the spans' own; attributes are not:
// they lie in the Decoder's buffer, their string values in the body, valid
// until the next Decode or Recycle and while the body is unchanged. A
// Decoder is not safe for concurrent use; reuse one per goroutine, as it
// keeps the strings that repeat from body to body.
type Decoder struct {
	dst      []span.Span
	scratch  span.Attrs // attributes of the span or resource being decoded
	rej      Rejected
	fieldErr error // the first *FieldError, returned unless the wire is also broken
	seen     int   // spans in the body, kept or not
	keep     map[string]string
	anyBuf   []byte
}

// Seen returns how many spans the last body decoded held, kept or not.
func (d *Decoder) Seen() int { return d.seen }

// wireError is a body that is not a valid ExportTraceServiceRequest.
type wireError struct {
	path string
	msg  string
}

func (e *wireError) Error() string {
	if e.path == "" {
		return "invalid protobuf: " + e.msg
	}
	return "invalid protobuf: " + e.path + ": " + e.msg
}

func parseError(path string, n int) error {
	return &wireError{path: path, msg: fieldError(n)}
}

var errRecursion = errors.New("exceeded maximum recursion depth")

// Decode appends the spans of body to dst, as Convert would append those of
// the body proto.Unmarshal decodes. A body that does not parse is an error
// ("invalid protobuf: ..."); a wrong-length id is a *FieldError. The spans
// of one resource share its Resource slice.
func (d *Decoder) Decode(dst []span.Span, body []byte) ([]span.Span, Rejected, error) {
	d.dst, d.rej, d.fieldErr, d.seen = dst, Rejected{}, nil, 0
	d.scratch = d.scratch[:0] // the last body's attributes are done with
	if d.keep == nil {
		d.keep = make(map[string]string, 64)
	}
	i := 0
	for len(body) > 0 {
		num, typ, n := consumeTag(body)
		if n < 0 {
			return d.dst, d.rej, parseError("", n)
		}
		body = body[n:]
		if num == fRequestResourceSpans && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(body)
			if n < 0 {
				return d.dst, d.rej, parseError("resourceSpans["+strconv.Itoa(i)+"]", n)
			}
			if err := d.resourceSpans(v, i); err != nil {
				return d.dst, d.rej, err
			}
			body = body[n:]
			i++
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, body); n < 0 {
			return d.dst, d.rej, parseError("", n)
		}
		body = body[n:]
	}
	return d.dst, d.rej, d.fieldErr
}

// Recycle drops what the Decoder holds of the last body's spans (their
// attributes); call it once those are no longer used, before pooling it.
func (d *Decoder) Recycle() {
	clear(d.scratch[:cap(d.scratch)])
	d.scratch = d.scratch[:0]
}

// resourceSpans decodes ResourceSpans number i: its resource first, wherever
// it lies in the message, then its scope spans.
func (d *Decoder) resourceSpans(b []byte, i int) error {
	path := func() string { return "resourceSpans[" + strconv.Itoa(i) + "]" }
	resFrom := len(d.scratch)
	scopes, resAttrs := 0, 0
	for rest := b; len(rest) > 0; {
		num, typ, n := consumeTag(rest)
		if n < 0 {
			return parseError(path(), n)
		}
		rest = rest[n:]
		switch {
		case num == fResourceSpansResource && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return parseError(path()+".resource", n)
			}
			kvs, err := d.resource(v, path)
			if err != nil {
				return err
			}
			resAttrs += kvs
			rest = rest[n:]
		case num == fResourceSpansScopeSpans && typ == protowire.BytesType:
			scopes++
			fallthrough
		default:
			if n = consumeField(num, typ, rest, num == fResourceSpansSchemaURL); n < 0 {
				return parseError(path(), n)
			}
			rest = rest[n:]
		}
	}
	var res span.Attrs
	if resAttrs > 0 {
		res = append(make(span.Attrs, 0, resAttrs), d.scratch[resFrom:]...)
	}
	d.scratch = d.scratch[:resFrom]
	if scopes == 0 {
		return nil
	}
	j := 0
	for rest := b; len(rest) > 0; {
		num, typ, n := consumeTag(rest)
		rest = rest[n:]
		if num != fResourceSpansScopeSpans || typ != protowire.BytesType {
			rest = rest[protowire.ConsumeFieldValue(num, typ, rest):]
			continue
		}
		v, n := protowire.ConsumeBytes(rest)
		rest = rest[n:]
		if err := d.scopeSpans(v, i, j, res); err != nil {
			return err
		}
		j++
	}
	return nil
}

// resource appends the attributes of a Resource to the scratch list and
// returns how many KeyValues it held (Convert sizes the slice so).
func (d *Decoder) resource(b []byte, path func() string) (int, error) {
	kvs := 0
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return kvs, parseError(path()+".resource", n)
		}
		b = b[n:]
		if num == fResourceAttributes && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return kvs, parseError(path()+".resource.attributes", n)
			}
			if err := d.keyValue(v, true, 2); err != nil {
				return kvs, &wireError{path: path() + ".resource.attributes", msg: err.Error()}
			}
			b = b[n:]
			kvs++
			continue
		}
		n = checkField(resourceDesc, num, typ, b, 2)
		if n < 0 {
			return kvs, &wireError{path: path() + ".resource", msg: fieldError(n)}
		}
		b = b[n:]
	}
	return kvs, nil
}

func (d *Decoder) scopeSpans(b []byte, i, j int, res span.Attrs) error {
	path := func() string { return "resourceSpans[" + strconv.Itoa(i) + "].scopeSpans[" + strconv.Itoa(j) + "]" }
	k := 0
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return parseError(path(), n)
		}
		b = b[n:]
		switch {
		case num == fScopeSpansSpans && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return parseError(path()+".spans["+strconv.Itoa(k)+"]", n)
			}
			if err := d.span(v, i, j, k, res); err != nil {
				return err
			}
			b = b[n:]
			k++
		case num == fScopeSpansScope && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return parseError(path()+".scope", n)
			}
			if err := checkMessage(v, scopeDesc, 3); err != nil {
				return &wireError{path: path() + ".scope", msg: err.Error()}
			}
			b = b[n:]
		default:
			if n = consumeField(num, typ, b, num == fScopeSpansSchemaURL); n < 0 {
				return parseError(path(), n)
			}
			b = b[n:]
		}
	}
	return nil
}

// span decodes one Span. Fields that occur twice keep the last value, as
// proto.Unmarshal does; status codes merge likewise.
func (d *Decoder) span(b []byte, i, j, k int, res span.Attrs) error {
	path := func() string {
		return "resourceSpans[" + strconv.Itoa(i) + "].scopeSpans[" + strconv.Itoa(j) + "].spans[" + strconv.Itoa(k) + "]"
	}
	d.seen++
	var (
		s                 span.Span
		traceID, spanID   []byte
		parentID          []byte
		kind, code        int32
		start, end        uint64
		name              string
		attrsFrom, nAttrs = len(d.scratch), 0
	)
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return parseError(path(), n)
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return parseError(path(), n)
			}
			b = b[n:]
			var err error
			switch num {
			case fSpanTraceID:
				traceID = v
			case fSpanSpanID:
				spanID = v
			case fSpanParentSpanID:
				parentID = v
			case fSpanName:
				var ok bool
				if name, ok = d.keepString(v); !ok {
					err = errors.New("name: invalid UTF-8")
				}
			case fSpanAttributes:
				nAttrs++
				err = d.keyValue(v, false, 4)
			case fSpanStatus:
				code, err = statusCode(v, code)
			case fSpanTraceState:
				if !utf8.Valid(v) {
					err = errors.New("traceState: invalid UTF-8")
				}
			case fSpanEvents:
				err = checkMessage(v, eventDesc, 4)
			case fSpanLinks:
				err = checkMessage(v, linkDesc, 4)
			}
			if err != nil {
				return &wireError{path: path(), msg: err.Error()}
			}
			continue
		case protowire.VarintType:
			if num == fSpanKind {
				v, n := protowire.ConsumeVarint(b)
				if n < 0 {
					return parseError(path(), n)
				}
				kind = int32(v)
				b = b[n:]
				continue
			}
		case protowire.Fixed64Type:
			if num == fSpanStart || num == fSpanEnd {
				v, n := protowire.ConsumeFixed64(b)
				if n < 0 {
					return parseError(path(), n)
				}
				if num == fSpanStart {
					start = v
				} else {
					end = v
				}
				b = b[n:]
				continue
			}
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return parseError(path(), n)
		}
		b = b[n:]
	}
	attrs := d.scratch[attrsFrom:]
	if d.fieldErr != nil {
		d.scratch = d.scratch[:attrsFrom]
		return nil // malformed already: only the wire is checked further
	}
	for _, id := range []struct {
		dst   []byte
		src   []byte
		field string
	}{{s.TraceID[:], traceID, "traceId"}, {s.SpanID[:], spanID, "spanId"}, {s.ParentID[:], parentID, "parentSpanId"}} {
		if err := copyID(id.dst, id.src, i, j, k, id.field); err != nil {
			d.fieldErr = err
			d.scratch = d.scratch[:attrsFrom]
			return nil
		}
	}
	if why, field := rejectReason(&s, start, end); why != "" {
		d.rej.add(spanPath(i, j, k, field), why)
		d.scratch = d.scratch[:attrsFrom]
		return nil
	}
	s.Name = name
	s.Kind = kindOf(kind)
	s.Error = code == int32(tracepb.Status_STATUS_CODE_ERROR)
	s.StartUnixNano, s.EndUnixNano = int64(start), int64(end)
	if nAttrs > 0 {
		s.Attrs = attrs[:len(attrs):len(attrs)]
	}
	s.Resource = res
	d.dst = append(d.dst, s)
	return nil
}

// statusCode returns the code of a Status message, or code when it holds
// none (a later Status merges into an earlier one).
func statusCode(b []byte, code int32) (int32, error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, codeError(n)
		}
		b = b[n:]
		switch {
		case num == fStatusCode && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, codeError(n)
			}
			code = int32(v)
			b = b[n:]
		default:
			if n = consumeField(num, typ, b, num == fStatusMessage); n < 0 {
				return 0, codeError(n)
			}
			b = b[n:]
		}
	}
	return code, nil
}

// keyValue appends the attribute a KeyValue holds to the scratch list,
// unless its key is empty (Convert drops those). Resource values are kept
// as repeated strings.
func (d *Decoder) keyValue(b []byte, resource bool, depth int) error {
	var (
		key     string
		hasKey  bool
		value   []byte
		nValues int
	)
	for rest := b; len(rest) > 0; {
		num, typ, n := consumeTag(rest)
		if n < 0 {
			return codeError(n)
		}
		rest = rest[n:]
		if typ == protowire.BytesType && (num == fKeyValueKey || num == fKeyValueValue) {
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return codeError(n)
			}
			rest = rest[n:]
			if num == fKeyValueKey {
				if key, hasKey = d.keepString(v); !hasKey {
					return errors.New("key: invalid UTF-8")
				}
			} else {
				value = v
				nValues++
			}
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, rest); n < 0 {
			return codeError(n)
		}
		rest = rest[n:]
	}
	var a span.Attr
	var err error
	switch {
	case nValues == 0:
		a = span.StringAttr(key, "")
	case nValues == 1:
		a, err = d.anyValue(key, value, resource, depth+1)
	default:
		a, err = d.mergedValue(key, b, depth+1)
	}
	if err != nil {
		return err
	}
	if key != "" {
		d.scratch = append(d.scratch, a)
	}
	return nil
}

// anyValue decodes one AnyValue. Scalars are decoded here; arrays, maps,
// bytes and string-table indexes go to proto.Unmarshal and Convert's text
// form.
func (d *Decoder) anyValue(key string, b []byte, resource bool, depth int) (span.Attr, error) {
	a := span.StringAttr(key, "null") // an empty AnyValue, as Convert renders it
	for rest := b; len(rest) > 0; {
		num, typ, n := consumeTag(rest)
		if n < 0 {
			return a, codeError(n)
		}
		rest = rest[n:]
		switch {
		case num == fAnyString && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return a, codeError(n)
			}
			rest = rest[n:]
			if resource {
				str, ok := d.keepString(v)
				if !ok {
					return a, errors.New("string value: invalid UTF-8")
				}
				a = span.StringAttr(key, str)
				continue
			}
			if !utf8.Valid(v) {
				return a, errors.New("string value: invalid UTF-8")
			}
			a = span.StringAttr(key, borrow(v))
		case (num == fAnyBool || num == fAnyInt) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return a, codeError(n)
			}
			rest = rest[n:]
			if num == fAnyBool {
				a = span.BoolAttr(key, v != 0)
			} else {
				a = span.IntAttr(key, int64(v))
			}
		case num == fAnyDouble && typ == protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(rest)
			if n < 0 {
				return a, codeError(n)
			}
			rest = rest[n:]
			a = span.FloatAttr(key, math.Float64frombits(v))
		case num >= fAnyFirstComplex && num <= fAnyLastComplex && typ == protowire.BytesType,
			num == fAnyStrindex && typ == protowire.VarintType:
			return d.protoValue(key, b, depth)
		default:
			if n = protowire.ConsumeFieldValue(num, typ, rest); n < 0 {
				return a, codeError(n)
			}
			rest = rest[n:]
		}
	}
	return a, nil
}

// mergedValue decodes a KeyValue whose value occurs more than once: the
// occurrences merge, as if their bytes were one AnyValue.
func (d *Decoder) mergedValue(key string, kv []byte, depth int) (span.Attr, error) {
	d.anyBuf = d.anyBuf[:0]
	for len(kv) > 0 {
		num, typ, n := consumeTag(kv)
		kv = kv[n:]
		if num == fKeyValueValue && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(kv)
			d.anyBuf = append(d.anyBuf, v...)
			kv = kv[n:]
			continue
		}
		kv = kv[protowire.ConsumeFieldValue(num, typ, kv):]
	}
	return d.protoValue(key, d.anyBuf, depth)
}

// protoValue decodes an AnyValue with proto.Unmarshal and renders it as
// Convert does.
func (d *Decoder) protoValue(key string, b []byte, depth int) (span.Attr, error) {
	var v commonpb.AnyValue
	if err := (proto.UnmarshalOptions{RecursionLimit: maxDepth - depth}).Unmarshal(b, &v); err != nil {
		return span.Attr{}, err
	}
	return attrOf(key, &v), nil
}

// borrow returns b as a string without a copy: b must not change while the
// string is used.
func borrow(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// keepString returns b as a string, shared with earlier bodies when short
// and seen before, and false when b is not valid UTF-8.
func (d *Decoder) keepString(b []byte) (string, bool) {
	if len(b) <= keepMaxLen {
		if s, ok := d.keep[string(b)]; ok {
			return s, true
		}
	}
	if !utf8.Valid(b) {
		return "", false
	}
	s := string(b)
	if len(b) <= keepMaxLen && len(d.keep) < keepMaxEntries {
		d.keep[s] = s
	}
	return s, true
}

// consumeField skips one field, checking it is valid UTF-8 when it is a
// string field (str) with the bytes wire type.
func consumeField(num protowire.Number, typ protowire.Type, b []byte, str bool) int {
	if str && typ == protowire.BytesType {
		v, n := protowire.ConsumeBytes(b)
		if n >= 0 && !utf8.Valid(v) {
			return errInvalidUTF8
		}
		return n
	}
	return protowire.ConsumeFieldValue(num, typ, b)
}

// Error codes of checkField beyond protowire's (which are -1 to -7 or so).
const (
	errInvalidUTF8 = -100 - iota
	errTooDeep
	errInvalidNested
	errFieldNumber
)

func fieldError(n int) string {
	switch n {
	case errInvalidUTF8:
		return "invalid UTF-8"
	case errTooDeep:
		return errRecursion.Error()
	case errInvalidNested:
		return "invalid nested message"
	case errFieldNumber:
		return "invalid field number"
	}
	return protowire.ParseError(n).Error()
}

// checkMessage checks a message the Decoder keeps nothing from as
// proto.Unmarshal would decode it: the wire format, UTF-8 in its strings,
// and the same of the messages it holds.
func checkMessage(b []byte, md protoreflect.MessageDescriptor, depth int) error {
	if depth > maxDepth {
		return errRecursion
	}
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return codeError(n)
		}
		b = b[n:]
		if n = checkField(md, num, typ, b, depth); n < 0 {
			return codeError(n)
		}
		b = b[n:]
	}
	return nil
}

// checkField skips field num of md, checking it as checkMessage does, and
// returns its length or a negative error code.
func checkField(md protoreflect.MessageDescriptor, num protowire.Number, typ protowire.Type, b []byte, depth int) int {
	fd := md.Fields().ByNumber(num)
	if fd == nil || typ != protowire.BytesType {
		return protowire.ConsumeFieldValue(num, typ, b)
	}
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return n
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.Valid(v) {
			return errInvalidUTF8
		}
	case protoreflect.MessageKind:
		if err := checkMessage(v, fd.Message(), depth+1); err != nil {
			if errors.Is(err, errRecursion) {
				return errTooDeep
			}
			return errInvalidNested
		}
	case protoreflect.BytesKind:
	default:
		if fd.IsList() && !packedOK(fd.Kind(), v) {
			return errInvalidNested
		}
	}
	return n
}

// packedOK reports whether v is a valid packed list of kind's values.
func packedOK(kind protoreflect.Kind, v []byte) bool {
	var typ protowire.Type
	switch kind {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		typ = protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		typ = protowire.Fixed64Type
	default:
		typ = protowire.VarintType
	}
	for len(v) > 0 {
		n := protowire.ConsumeFieldValue(1, typ, v)
		if n < 0 {
			return false
		}
		v = v[n:]
	}
	return true
}

// consumeTag is protowire.ConsumeTag refusing field numbers above the
// largest valid one, as proto.Unmarshal does.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, errFieldNumber
	}
	return num, typ, n
}

// codeError turns a negative length from protowire or checkField into an
// error.
func codeError(n int) error { return errors.New(fieldError(n)) }
