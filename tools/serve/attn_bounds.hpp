// Bounds on the method parameters a request may set in "spattn": {"attn": SPEC}, so that one
// request's prefill costs a small multiple of dense's: a block size of 1 turns a block method's
// per-block bookkeeping into per-token work (`flexprefill:block=1` took 10.4 s where the
// default took 0.6 s at 2,100 tokens). The operator's --attn is not bounded. Checked here on
// the parsed spec, the methods' own ranges being what a command line may ask.
#pragma once
#include <string>

namespace spattn::serve {

// Throws a 400 RequestError naming spattn.attn and the bound when a parameter is under it.
void check_attn_bounds(const std::string& spec);

}  // namespace spattn::serve
