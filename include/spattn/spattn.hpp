// Umbrella header.
#pragma once
#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/io.hpp"
#include "spattn/merge.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"
#include "spattn/tensor.hpp"
#include "spattn/workload.hpp"
