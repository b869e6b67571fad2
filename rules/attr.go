package rules

import (
	"sort"
	"strings"
)

// The attribution keys rules read as `attr.<key>`. Triage computes them
// (diagnose/attribution.go) from the canonical signals before the walk: the
// change of mean TTFT between the windows split into the engine's queue,
// prefill and the time before the engine, and the change of mean
// inter-token latency split over its drivers. Shares are fractions of the
// change (they sum to 1 with the unexplained share); a key is absent when
// the signals it needs are missing or the latency did not rise.
const (
	AttrTTFTDelta       = "ttft_delta"       // seconds: TTFT mean now − baseline
	AttrTTFTQueue       = "ttft_queue"       // share of ttft_delta from engine queue time
	AttrTTFTPrefill     = "ttft_prefill"     // share from prefill time (scheduled → first token)
	AttrTTFTOutside     = "ttft_outside"     // share from time before the engine queue (API server, tokenizer)
	AttrTTFTUnexplained = "ttft_unexplained" // share no measured component covers
	AttrITLDelta        = "itl_delta"        // seconds: inter-token latency mean now − baseline
	AttrITLBatch        = "itl_batch"        // share from more requests decoding per step
	AttrITLContext      = "itl_context"      // share from more KV context read per decoding request
	AttrITLPrefill      = "itl_prefill"      // share from more prompt tokens computed per step
	AttrITLRecompute    = "itl_recompute"    // share from recomputing preempted requests
	AttrITLClock        = "itl_clock"        // share from lower GPU clocks
	AttrITLUnexplained  = "itl_unexplained"  // share the step model does not explain
	AttrUnexplained     = "unexplained"      // unexplained share of the larger symptom (TTFT or ITL, by relative rise); absent when a part of its split was not measured
	// AttrITLSymptom is the inter-token half's share of the slowdown users
	// felt, by relative rise: ln(ITL ratio) over ln(ITL ratio) + ln(TTFT
	// ratio), rises only. A mechanism on the decode path (context, bandwidth)
	// explains no more of the incident than this share.
	AttrITLSymptom = "itl_symptom"
)

var attrKeys = map[string]bool{
	AttrTTFTDelta: true, AttrTTFTQueue: true, AttrTTFTPrefill: true, AttrTTFTOutside: true, AttrTTFTUnexplained: true,
	AttrITLDelta: true, AttrITLBatch: true, AttrITLContext: true, AttrITLPrefill: true, AttrITLRecompute: true,
	AttrITLClock: true, AttrITLUnexplained: true, AttrUnexplained: true, AttrITLSymptom: true,
}

// AttrKeyList lists the attribution keys, sorted, for messages and docs.
func AttrKeyList() string {
	ks := make([]string, 0, len(attrKeys))
	for k := range attrKeys {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}
