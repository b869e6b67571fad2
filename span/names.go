package span

// Span names and attributes of the request model (docs/engines.md §6).
const (
	SpanLLMRequest           = "llm_request"
	SpanGatewayRequest       = "gateway.request"
	SpanGatewayOrchestration = "gateway.request_orchestration"
	SpanPDProxyPrefill       = "llm_d.pd_proxy.prefill"
	SpanPDProxyDecode        = "llm_d.pd_proxy.decode"

	AttrRequestID        = "gen_ai.request.id"
	AttrPromptTokens     = "gen_ai.usage.prompt_tokens"
	AttrCompletionTokens = "gen_ai.usage.completion_tokens"
	AttrTimeInQueue      = "gen_ai.latency.time_in_queue"
	AttrTTFT             = "gen_ai.latency.time_to_first_token"
	AttrTimeInPrefill    = "gen_ai.latency.time_in_model_prefill"
	AttrTimeInDecode     = "gen_ai.latency.time_in_model_decode"
	AttrE2E              = "gen_ai.latency.e2e"
	// AttrResponseModel is the model that served the request (vLLM's
	// llm_request sets it); AttrRequestModel the model the client asked
	// for (the gateway's span carries it).
	AttrResponseModel = "gen_ai.response.model"
	AttrRequestModel  = "gen_ai.request.model"
	// AttrNamespace is the resource attribute of the pod's namespace.
	AttrNamespace = "k8s.namespace.name"
)
