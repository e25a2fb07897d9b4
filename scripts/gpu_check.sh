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

if [ "${SPATTN_GPU_CHECK:-all}" = momo ]; then
  # Each step's log in $out; its exit status on the console. First what must hold before any
  # figure means anything: the GPU selection against the CPU's, then the sanitizers.
  echo "== momo tests (wgmma, then mma.sync), and the kernels' own tests"
  timeout 150 ./build/bin/spattn_cuda_tests --gtest_filter='CudaMomo.*' > "$out/momo.log" 2>&1
  echo "rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|differ|ties|Expected|Which is" "$out/momo.log" | head -40
  SPATTN_CUDA_KERNEL=mma timeout 120 ./build/bin/spattn_cuda_tests --gtest_filter='CudaMomo.*' \
    > "$out/momo-mma.log" 2>&1
  echo "mma rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$out/momo-mma.log"
  timeout 150 ./build/bin/spattn_cuda_tests \
    --gtest_filter='CudaAttention.QuerySparse*:CudaAttention.BlockSparse*:CudaMethods.*:CudaBench.*' \
    > "$out/kernels.log" 2>&1
  echo "kernels rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$out/kernels.log"
  echo "== memcheck, racecheck (momo)"
  sanitize memcheck 150 'CudaMomo.EveryBlock*:CudaMomo.SelectionMatches*:CudaMomo.Fused*'
  sanitize racecheck 150 'CudaMomo.EveryBlock*:CudaMomo.Fused*'
  echo "== momo (its selection unfused and fused) against cuDNN SDPA"
  timeout 240 python3 scripts/cuda_vs_torch.py --lib build/lib/libspattn_c.so --skip-prefill \
    --also-fused \
    --skip-blasst --skip-decode --reps 5 --warmup 1 --json "$out/bench-momo.json" \
    > "$out/bench-momo.log" 2>&1
  echo "rc=$?; record: $out/bench-momo.json"; grep -E '"contender"|Error|error' "$out/bench-momo.log" | cut -c1-400
  exit 0
fi

if [ "${SPATTN_GPU_CHECK:-all}" = blasst ]; then
  # Issue 62 item 4: BLASST in 64-row tiles (each group skips alone) against 128-row ones.
  echo "== BLASST tests, 128-row and 64-row tiles (each group's decisions against the CPU's)"
  timeout 150 ./build/bin/spattn_cuda_tests --gtest_filter='CudaAttention.Blasst*:CudaMethods.*' \
    > "$out/blasst.log" 2>&1
  echo "rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|BLASST  \]" "$out/blasst.log" | head -40
  echo "== memcheck, racecheck (BLASST in 64-row tiles)"
  SPATTN_CUDA_BLASST_ROWS=64 sanitize memcheck 150 'CudaAttention.BlasstLambda*'
  SPATTN_CUDA_BLASST_ROWS=64 sanitize racecheck 120 'CudaAttention.BlasstLambda*'
  echo "== BLASST at 32K on text: 128-row tiles (wgmma, mma.sync) and 64-row tiles, against dense"
  timeout 240 python3 scripts/cuda_vs_torch.py --lib build/lib/libspattn_c.so --skip-prefill \
    --skip-decode --skip-momo --also-mma --also-blasst64 --blasst-lambda 0.001,0.01,0.02,0.05 \
    --reps 5 --warmup 1 --json "$out/bench-blasst.json" > "$out/bench-blasst.log" 2>&1
  echo "rc=$?; record: $out/bench-blasst.json"; grep -E '"contender"|Error|error' "$out/bench-blasst.log" | cut -c1-400
  exit 0
fi

if [ "${SPATTN_GPU_CHECK:-all}" = dense ]; then
  echo "== kernel tests, then the prefill kernels' tests on the overlapped form"
  timeout 120 ./build/bin/spattn_cuda_tests --gtest_filter='CudaKernels.*' > "$out/kernels.log" 2>&1
  echo "rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is" "$out/kernels.log" | head -30
  SPATTN_CUDA_KERNEL=wgmma_overlap timeout 100 ./build/bin/spattn_cuda_tests \
    --gtest_filter='CudaAttention.*:CudaMethods.*' > "$out/overlap.log" 2>&1
  echo "overlap rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure" "$out/overlap.log" | head -20
  SPATTN_CUDA_KERNEL=wgmma_pingpong SPATTN_CUDA_TMA=1 timeout 100 ./build/bin/spattn_cuda_tests \
    --gtest_filter='CudaAttention.*:CudaMethods.*' > "$out/pingpong-tma.log" 2>&1
  echo "pingpong+tma rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure" "$out/pingpong-tma.log" | head -20
  echo "== memcheck (overlap), racecheck (pingpong with TMA: the named barriers, the tx counts)"
  SPATTN_CUDA_KERNEL=wgmma_overlap sanitize memcheck 100 \
    'CudaAttention.DenseMatches*:CudaAttention.BlockSparseMatches*'
  SPATTN_CUDA_KERNEL=wgmma_pingpong SPATTN_CUDA_TMA=1 sanitize racecheck 100 \
    'CudaAttention.BlockSparseMatches*'
  echo "== dense and block-sparse in each form against cuDNN SDPA"
  timeout 200 python3 scripts/cuda_vs_torch.py --lib build/lib/libspattn_c.so --skip-blasst \
    --skip-decode --skip-momo --also-schedules --lens 32768,131072 --reps 3 --warmup 1 \
    --json "$out/bench-dense.json" > "$out/bench-dense.log" 2>&1
  echo "rc=$?; record: $out/bench-dense.json"; grep -E '"contender"|Error|error' "$out/bench-dense.log" | cut -c1-400
  exit 0
fi

if [ "${SPATTN_GPU_CHECK:-all}" = tokens ]; then
  echo "== token-level tests: vertical_slash, the grid head and its row groups, mminference"
  timeout 150 ./build/bin/spattn_cuda_tests \
    --gtest_filter='CudaVerticalSlash.*:CudaGrid.*:CudaMMInference.*' > "$out/tokens.log" 2>&1
  echo "rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is" "$out/tokens.log" | head -40
  echo "== memcheck, racecheck (token-level kernels)"
  sanitize memcheck 150 'CudaVerticalSlash.Kernel*:CudaVerticalSlash.Device*:CudaGrid.*'
  sanitize racecheck 120 'CudaVerticalSlash.Kernel*:CudaGrid.Gathered*'
  echo "== vertical_slash and grid against cuDNN SDPA"
  timeout 240 python3 scripts/cuda_vs_torch.py --lib build/lib/libspattn_c.so --skip-prefill \
    --skip-blasst --skip-decode --reps 3 --warmup 1 --momo-specs "vertical_slash,grid" \
    --json "$out/bench-tokens.json" > "$out/bench-tokens.log" 2>&1
  echo "rc=$?; record: $out/bench-tokens.json"; grep -E '"contender"|Error|error' "$out/bench-tokens.log" | cut -c1-400
  exit 0
fi

if [ "${SPATTN_GPU_CHECK:-all}" = estimates ]; then
  echo "== estimate tests (wgmma, then mma.sync), the method API's and momo's"
  timeout 150 ./build/bin/spattn_cuda_tests \
    --gtest_filter='CudaEstimates.*:CudaFlexPrefill.*:CudaMethods.*:CudaMomo.*' \
    > "$out/estimates.log" 2>&1
  echo "rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|head [0-9]+ query|ties|differ|Expected|Which is" "$out/estimates.log" | head -40
  SPATTN_CUDA_KERNEL=mma timeout 120 ./build/bin/spattn_cuda_tests \
    --gtest_filter='CudaEstimates.*:CudaFlexPrefill.*:CudaMethods.*' > "$out/estimates-mma.log" 2>&1
  echo "mma rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$out/estimates-mma.log"
  echo "== memcheck, racecheck (estimates)"
  sanitize memcheck 150 'CudaEstimates.OddShapes*:CudaEstimates.EveryBlock*:CudaFlexPrefill.Repeats*'
  sanitize racecheck 120 'CudaEstimates.OddShapes*:CudaFlexPrefill.Repeats*'
  echo "== xattention, mean_pool, flexprefill and momo against cuDNN SDPA"
  timeout 240 python3 scripts/cuda_vs_torch.py --lib build/lib/libspattn_c.so --skip-prefill \
    --skip-blasst --skip-decode --reps 3 --warmup 1 \
    --momo-specs "xattention,mean_pool:topp=0.9,mean_pool,flexprefill,momo" --json "$out/bench-estimates.json" \
    > "$out/bench-estimates.log" 2>&1
  echo "rc=$?; record: $out/bench-estimates.json"; grep -E '"contender"|Error|error' "$out/bench-estimates.log" | cut -c1-400
  exit 0
fi

echo "== GPU tests (on a Hopper: the wgmma kernel, then again on the mma.sync one)"
timeout 300 ./build/bin/spattn_cuda_tests > "$out/tests.log" 2>&1
echo "rc=$?"; grep -E "^\[  (PASSED|FAILED)|differ" "$out/tests.log"
SPATTN_CUDA_KERNEL=mma timeout 300 ./build/bin/spattn_cuda_tests \
  --gtest_filter='CudaAttention.*:CudaMethods.*' > "$out/tests-mma.log" 2>&1
echo "mma rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$out/tests-mma.log"

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
