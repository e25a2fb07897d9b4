#!/bin/bash
# The GPU round of issue 25 on a machine with an NVIDIA GPU, from the repository root after a
# CUDA build (`make build` with nvcc >= 12 found): the GPU tests, compute-sanitizer's memcheck
# and racecheck on the kernels, then the benchmark against PyTorch's SDPA backends.
#   scripts/gpu_check.sh [OUT_DIR]         (default: gpu-check/)
#   SPATTN_NCU=1 scripts/gpu_check.sh ...  also profiles the prefill kernels with Nsight Compute
#   SPATTN_GPU_CHECK=momo scripts/gpu_check.sh ...  the MOMO round alone (issue 62, under 8
#       minutes on an H200): the momo tests on both prefill kernels (the fused selection's
#       against the selection kernel's, bit for bit), the GPU tests that touch the kernels it
#       changed, memcheck and racecheck on the momo tests, the Python momo test, and the momo
#       rows against cuDNN SDPA (32K and 128K, random and text; unfused and fused)
#   SPATTN_GPU_CHECK=blasst scripts/gpu_check.sh ...  BLASST's tile height (issue 62 item 4; under
#       8 minutes): the BLASST tests at 128-row and 64-row tiles, the sanitizers on the 64-row
#       kernel, and BLASST at 32K on text in both heights (and mma.sync) against dense
#   SPATTN_GPU_CHECK=estimates scripts/gpu_check.sh ...  the block-selecting estimates round
#       (issue 62, items 3 and 6; under 8 minutes on an H200): xattention's and mean_pool's
#       selection on the device against the host's rule and method (CudaEstimates),
#       flexprefill's choices and lists against the host method's (CudaFlexPrefill), the
#       method API and momo tests (momo's lists run through block_lists.cu), both prefill
#       kernels, memcheck and racecheck on the estimate kernels, and the rows of xattention,
#       mean_pool (topp and topk), flexprefill and momo against cuDNN SDPA at 32K and 128K
#   SPATTN_GPU_CHECK=dense scripts/gpu_check.sh ...  FlashAttention-3's steps (issue 62, item
#       5; under 8 minutes): the kernel tests (each schedule and TMA against the plain form, bit
#       for bit), the prefill kernels' tests under SPATTN_CUDA_KERNEL=wgmma_overlap, then
#       wgmma_pingpong with SPATTN_CUDA_TMA=1, memcheck and racecheck on them, then dense and
#       128-row block-sparse at 32K and 128K in every form against cuDNN SDPA (vs_plain: a
#       form's gain over the plain one)
#   SPATTN_GPU_CHECK=tokens scripts/gpu_check.sh ...  the token-level round (issue 62, items 2
#       and 3; under 8 minutes): vertical_slash's estimate and kernel against the CPU's
#       (CudaVerticalSlash), the grid head, its search and its gathered row groups (CudaGrid),
#       mminference's heads (CudaMMInference), memcheck and racecheck on the token-level
#       kernels, and vertical_slash's and grid's rows against cuDNN SDPA at 32K and 128K
# Needs on that machine: the runtime libraries the binaries link (libgomp, libhwy, libfmt,
# libopenblas: put copies on LD_LIBRARY_PATH where the image lacks them), compute-sanitizer,
# and torch with CUDA for the benchmark and the Python tests. Where build/python's extension is
# for another interpreter (a build machine's Debian Python against the GPU machine's), it is
# built here for python3 from build/libspattn.a with this machine's g++ and pip's pybind11 (the
# shared libraries it links: on LD_LIBRARY_PATH, or in $SPATTN_RUNTIME_LIBS).
set -u
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$out/gpu.txt"

# compute-sanitizer's TOOL (memcheck, racecheck) on the GPU tests FILTER, within SECONDS, its log
# in $out/TOOL.log; prints the exit status and the summary lines. Environment for the run (a
# kernel choice) goes before the call.
sanitize() {
  local tool=$1 seconds=$2 filter=$3
  timeout "$seconds" compute-sanitizer --tool "$tool" --error-exitcode 9 \
    ./build/bin/spattn_cuda_tests --gtest_filter="$filter" > "$out/$tool.log" 2>&1
  echo "$tool rc=$?"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|^\[  (PASSED|FAILED)" "$out/$tool.log"
}

# The GPU tests FILTER within SECONDS, their log in $out/NAME.log; prints NAME's exit status and
# the log's lines that match PATTERN (default: the summary), 40 at most. Environment for the run
# goes before the call.
gpu_tests() {
  local name=$1 seconds=$2 filter=$3 pattern=${4:-'^\[  (PASSED|FAILED)'}
  timeout "$seconds" ./build/bin/spattn_cuda_tests --gtest_filter="$filter" > "$out/$name.log" 2>&1
  echo "$name rc=$?"
  grep -E "$pattern" "$out/$name.log" | head -40
}

# scripts/cuda_vs_torch.py with ARGS within SECONDS, its record in $out/bench-NAME.json and its
# log beside it; prints the exit status and the rows' contenders.
bench() {
  local name=$1 seconds=$2
  shift 2
  timeout "$seconds" python3 scripts/cuda_vs_torch.py --lib build/lib/libspattn_c.so "$@" \
    --json "$out/bench-$name.json" > "$out/bench-$name.log" 2>&1
  echo "rc=$?; record: $out/bench-$name.json"
  grep -E '"contender"|Error|error' "$out/bench-$name.log" | cut -c1-400
}

# What a failing test says about itself.
detail='^\[  (PASSED|FAILED)|Failure|Expected|Which is'

if [ "${SPATTN_GPU_CHECK:-all}" = momo ]; then
  # Each step's log in $out; its exit status on the console. First what must hold before any
  # figure means anything: the GPU selection against the CPU's, then the sanitizers.
  echo "== momo tests (wgmma, then mma.sync), and the kernels' own tests"
  gpu_tests momo 150 'CudaMomo.*' "$detail|differ|ties"
  SPATTN_CUDA_KERNEL=mma gpu_tests momo-mma 120 'CudaMomo.*'
  gpu_tests kernels 150 \
    'CudaAttention.QuerySparse*:CudaAttention.BlockSparse*:CudaMethods.*:CudaBench.*'
  echo "== memcheck, racecheck (momo)"
  sanitize memcheck 150 'CudaMomo.EveryBlock*:CudaMomo.SelectionMatches*:CudaMomo.Fused*'
  sanitize racecheck 150 'CudaMomo.EveryBlock*:CudaMomo.Fused*'
  echo "== momo (its selection unfused and fused) against cuDNN SDPA"
  bench momo 240 --skip-prefill --also-fused --skip-blasst --skip-decode --reps 5 --warmup 1
  exit 0
fi

if [ "${SPATTN_GPU_CHECK:-all}" = blasst ]; then
  # Issue 62 item 4: BLASST in 64-row tiles (each group skips alone) against 128-row ones.
  echo "== BLASST tests, 128-row and 64-row tiles (each group's decisions against the CPU's)"
  gpu_tests blasst 150 'CudaAttention.Blasst*:CudaMethods.*' \
    '^\[  (PASSED|FAILED)|Failure|BLASST  \]'
  echo "== memcheck, racecheck (BLASST in 64-row tiles)"
  SPATTN_CUDA_BLASST_ROWS=64 sanitize memcheck 150 'CudaAttention.BlasstLambda*'
  SPATTN_CUDA_BLASST_ROWS=64 sanitize racecheck 120 'CudaAttention.BlasstLambda*'
  echo "== BLASST at 32K on text: 128-row tiles (wgmma, mma.sync) and 64-row tiles, against dense"
  bench blasst 240 --skip-prefill --skip-decode --skip-momo --also-mma --also-blasst64 \
    --blasst-lambda 0.001,0.01,0.02,0.05 --reps 5 --warmup 1
  exit 0
fi

if [ "${SPATTN_GPU_CHECK:-all}" = dense ]; then
  echo "== kernel tests, then the prefill kernels' tests on the overlapped form"
  gpu_tests kernels 120 'CudaKernels.*' "$detail"
  SPATTN_CUDA_KERNEL=wgmma_overlap gpu_tests overlap 100 'CudaAttention.*:CudaMethods.*' \
    '^\[  (PASSED|FAILED)|Failure'
  SPATTN_CUDA_KERNEL=wgmma_pingpong SPATTN_CUDA_TMA=1 gpu_tests pingpong-tma 100 \
    'CudaAttention.*:CudaMethods.*' '^\[  (PASSED|FAILED)|Failure'
  echo "== memcheck (overlap), racecheck (pingpong with TMA: the named barriers, the tx counts)"
  SPATTN_CUDA_KERNEL=wgmma_overlap sanitize memcheck 100 \
    'CudaAttention.DenseMatches*:CudaAttention.BlockSparseMatches*'
  SPATTN_CUDA_KERNEL=wgmma_pingpong SPATTN_CUDA_TMA=1 sanitize racecheck 100 \
    'CudaAttention.BlockSparseMatches*'
  echo "== dense and block-sparse in each form against cuDNN SDPA"
  bench dense 200 --skip-blasst --skip-decode --skip-momo --also-schedules \
    --lens 32768,131072 --reps 3 --warmup 1
  exit 0
fi

if [ "${SPATTN_GPU_CHECK:-all}" = tokens ]; then
  echo "== token-level tests: vertical_slash, the grid head and its row groups, mminference"
  gpu_tests tokens 150 'CudaVerticalSlash.*:CudaGrid.*:CudaMMInference.*' "$detail"
  echo "== memcheck, racecheck (token-level kernels)"
  sanitize memcheck 150 'CudaVerticalSlash.Kernel*:CudaVerticalSlash.Device*:CudaGrid.*'
  sanitize racecheck 120 'CudaVerticalSlash.Kernel*:CudaGrid.Gathered*'
  echo "== vertical_slash and grid against cuDNN SDPA"
  bench tokens 240 --skip-prefill --skip-blasst --skip-decode --reps 3 --warmup 1 \
    --momo-specs "vertical_slash,grid"
  exit 0
fi

if [ "${SPATTN_GPU_CHECK:-all}" = estimates ]; then
  echo "== estimate tests (wgmma, then mma.sync), the method API's and momo's"
  gpu_tests estimates 150 'CudaEstimates.*:CudaFlexPrefill.*:CudaMethods.*:CudaMomo.*' \
    "$detail|head [0-9]+ query|ties|differ"
  SPATTN_CUDA_KERNEL=mma gpu_tests estimates-mma 120 \
    'CudaEstimates.*:CudaFlexPrefill.*:CudaMethods.*'
  echo "== memcheck, racecheck (estimates)"
  sanitize memcheck 150 'CudaEstimates.OddShapes*:CudaEstimates.EveryBlock*:CudaFlexPrefill.Repeats*'
  sanitize racecheck 120 'CudaEstimates.OddShapes*:CudaFlexPrefill.Repeats*'
  echo "== xattention, mean_pool, flexprefill and momo against cuDNN SDPA"
  bench estimates 240 --skip-prefill --skip-blasst --skip-decode --reps 3 --warmup 1 \
    --momo-specs "xattention,mean_pool:topp=0.9,mean_pool,flexprefill,momo"
  exit 0
fi

echo "== GPU tests (on a Hopper: the wgmma kernel, then again on the mma.sync one)"
gpu_tests tests 300 '*' '^\[  (PASSED|FAILED)|differ'
SPATTN_CUDA_KERNEL=mma gpu_tests tests-mma 300 'CudaAttention.*:CudaMethods.*'

echo "== memcheck, racecheck"
sanitize memcheck 300 '*'
sanitize racecheck 300 \
  'CudaAttention.BlasstLambda*:CudaAttention.Strided*:CudaDecode.DenseMatches*:CudaDecode.MethodsTake*'

echo "== Python on torch CUDA tensors"
ext=$(ls build/python/spattn/_core.cpython-*.so 2>/dev/null | head -1)
want=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null)
pydir=build/python
if [ -z "$ext" ] || [ "${ext%"$want"}" = "$ext" ]; then
  echo "build/python's extension (${ext:-none}) is not for this python3 ($want): building one"
  pydir="$out/python"
  mkdir -p "$pydir/spattn" && cp python/spattn/*.py "$pydir/spattn/"
  libs=${SPATTN_RUNTIME_LIBS:-}
  timeout 300 g++ -O2 -fPIC -shared -fvisibility=hidden -std=c++20 -DGGML_USE_CPU -Isrc -Iinclude \
    $(python3 -m pybind11 --includes) python/src/*.cpp -o "$pydir/spattn/_core$want" \
    -Wl,--as-needed build/libspattn.a build/ggml/src/libggml.a build/ggml/src/libggml-cpu.a \
    build/ggml/src/libggml-base.a -L/usr/local/cuda/lib64 -lcudart_static -lrt -ldl -lpthread \
    ${libs:+-L"$libs"} -l:libgomp.so.1 -l:libhwy.so.1 -l:libfmt.so.9 -l:libpng16.so.16 \
    -l:libopenblas.so.0 > "$out/python-build.log" 2>&1 || { echo "build failed:"; tail -5 "$out/python-build.log"; }
fi
if [ -e "$pydir/spattn/_core$want" ]; then
  PYTHONPATH="$pydir:python/tests" timeout 300 python3 -m pytest -q -p no:cacheprovider -rs \
    python/tests/test_cuda.py python/tests/test_torch.py 2>&1 | tail -5
fi

if [ "${SPATTN_NCU:-0}" = 1 ]; then
  # Nsight Compute on the prefill kernels at 32K on `text`: the first dense and BLASST (lambda
  # 1e-3) launches of the kernel the device picks (warm-up 0, one timed rep each).
  echo "== ncu: dense and BLASST prefill at 32K"
  timeout 600 ncu --clock-control none -k regex:flash_fwd_kernel --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SourceCounters \
    python3 scripts/cuda_vs_torch.py --lib build/lib/libspattn_c.so --skip-prefill --skip-decode \
    --blasst-lambda 0.001 --methods "" --reps 1 --warmup 0 > "$out/ncu.txt" 2>&1
  echo "ncu rc=$?; report: $out/ncu.txt"
fi

echo "== benchmark against torch SDPA"
timeout 900 python3 scripts/cuda_vs_torch.py --lib build/lib/libspattn_c.so --reps 5 --also-mma \
  --json "$out/bench.json" > "$out/bench.log" 2>&1
echo "rc=$?; record: $out/bench.json"
