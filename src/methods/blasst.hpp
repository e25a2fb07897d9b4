// BLASST's spec for a caller that runs its rule itself: context parallelism's ring
// (src/dist/ring_attention.cpp, through the session).
#pragma once
#include "spattn/method.hpp"

namespace spattn {

// The fixed threshold of a blasst spec run across ranks (--cp): blasst:lambda=X with the
// local-first order (the default). Throws Error for a spec make_method refuses, and by name
// for what the ring cannot carry: sparsity=S,calib=FILE (its threshold follows the kv length
// of each one-process chunk) and order=in_order (the seed is local-first's first two tiles).
double blasst_cp_lambda(const MethodSpec& spec);

}  // namespace spattn
