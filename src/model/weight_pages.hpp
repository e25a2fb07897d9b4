// The memory pages under the weights: mapping the file's in at load, huge pages for the copies
// the loader makes, and giving back the file's pages a copy replaced (docs/runner.md, "The
// weights in huge pages").
#pragma once

#include <cstddef>

#include "ggml-backend.h"

namespace spattn::model {

// Maps in the file's pages under [data, data + n) in one call rather than a fault per few
// pages as they are first read (advice: a kernel without MADV_POPULATE_READ faults them in as
// before).
void populate(const void* data, size_t n);

// Whether memory advised with MADV_HUGEPAGE can get transparent huge pages here: THP's mode is
// "always" or "madvise", not "never" (or the kernel has no THP).
bool huge_pages_offered();

// Advises the whole 2 MiB pages inside buf, weights written once and read whole at every step,
// onto huge pages (advice only: where THP is off it changes nothing).
void advise_huge_pages(ggml_backend_buffer_t buf);

// Releases the mapping's whole pages inside [data, data + n) once a copy holds them (neighbours
// keep theirs), so the file's pages and the copies are never all resident. A later read of
// them faults the file's bytes in again.
void release_mapped(const void* data, size_t n);

}  // namespace spattn::model
