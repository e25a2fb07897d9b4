#!/bin/bash
# The GPU round of issue 25 on a machine with an NVIDIA GPU, from the repository root after a
# CUDA build (`make build` with nvcc >= 12 found): the GPU tests, compute-sanitizer's memcheck
# and racecheck on the kernels, then the benchmark against PyTorch's SDPA backends.
#   scripts/gpu_check.sh [OUT_DIR]         (default: gpu-check/)
# Needs on that machine: the runtime libraries the binaries link (libgomp, libhwy, libfmt,
# libopenblas: put copies on LD_LIBRARY_PATH where the image lacks them), compute-sanitizer,
# and torch with CUDA for the benchmark and the Python tests (the extension must have been built
# for that interpreter's version: the Python tests are skipped otherwise).
set -u
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$out/gpu.txt"

echo "== GPU tests"
timeout 300 ./build/bin/spattn_cuda_tests > "$out/tests.log" 2>&1
echo "rc=$?"; grep -E "^\[  (PASSED|FAILED)|differ" "$out/tests.log"

echo "== memcheck, racecheck"
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 ./build/bin/spattn_cuda_tests \
  > "$out/memcheck.log" 2>&1; echo "memcheck rc=$?"
timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 ./build/bin/spattn_cuda_tests \
  --gtest_filter='CudaAttention.BlasstLambda*:CudaAttention.Strided*:CudaDecode.DenseMatches*:CudaDecode.MethodsTake*' \
  > "$out/racecheck.log" 2>&1; echo "racecheck rc=$?"

echo "== Python on torch CUDA tensors"
ext=$(ls build/python/spattn/_core.cpython-*.so 2>/dev/null | head -1)
want=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null)
if [ -n "$ext" ] && [ "${ext%"$want"}" != "$ext" ]; then
  PYTHONPATH=build/python timeout 300 python3 -m pytest -q -p no:cacheprovider \
    python/tests/test_cuda.py python/tests/test_torch.py 2>&1 | tail -5
else
  echo "skipped: build/python's extension ($ext) is not for this python3 ($want)"
fi

echo "== benchmark against torch SDPA"
timeout 900 python3 scripts/cuda_vs_torch.py --lib build/lib/libspattn_c.so --reps 5 \
  --json "$out/bench.json" > "$out/bench.log" 2>&1
echo "rc=$?; record: $out/bench.json"
