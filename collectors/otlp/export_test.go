package otlp

// Aliases for the external test package (otlp_test), which may import the
// span store: spanstore imports otlp, so an internal test cannot.
var (
	TestRequest = testRequest
	Post        = post
)

// ContentProtobuf is the protobuf content type, for otlp_test.
const ContentProtobuf = contentProtobuf
