# The two commands: `make run` and `make test`.
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
# Executions per fuzz target (libFuzzer -runs); not part of ctest.
FUZZ_RUNS  ?= 1000000
JOBS       ?= $(shell nproc)

.PHONY: deps build python run test test-unit test-long test-sanitize test-tsan fuzz bench format clean

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The Python package alone (also part of `build`): import it with PYTHONPATH=$(BUILD)/python
# under /usr/bin/python3, or install it with pip (see docs/python.md).
python: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target spattn_python spattn_run_method

# The default benchmark: every method at its paper defaults against dense on a 16K text
# workload, speedup beside recall (35-60 s on 2 cores).
run: build
	./$(BUILD)/bin/spattn bench

# Every test: C++ tests of every label (unit, model, llama, mpi, slow; gpu where built) and the
# Python package's pytest, but long (test-long). A test whose asset (a model, llama.cpp's tools,
# MPI) is absent skips; SPATTN_REQUIRE_ASSETS=1 makes that a failure (.ci/run). docs/testing.md
# has the labels.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -LE long

# The comparisons with llama.cpp at long contexts (label long: -c 8192, where DSA's top-k
# selects): tens of minutes on 2 cores, so not in `make test` nor CI.
test-long: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L long

# The unit tests alone: no asset needed, a few minutes on 2 cores.
test-unit: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L unit

# The tests under AddressSanitizer + UndefinedBehaviorSanitizer: unit, model and mpi. Left out:
# slow (minutes each when instrumented) and llama (parity with llama.cpp is the optimised build's
# property, checked by `make test`; its scripts would run the instrumented binary for minutes).
# Only the tests' binary and what it runs are built: no CUDA, Python or benchmarks here.
test-sanitize: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPATTN_SANITIZE=ON > /dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target spattn_tests
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -LE 'slow|llama|long'

# The tests of state shared between threads and calls under ThreadSanitizer: sessions and
# their KV cache, PackedKV, per-call BLAS thread counts and bf16 operand paths (threads
# running benches, methods and kernels at once), decode products' range claims, and the
# server's workers, connections, slots and queue (`spattn serve`'s tests but the slow ones).
# Not in .ci/run: a separate instrumented build, and several minutes on 2 cores. TSAN_TESTS
# picks other GoogleTest names.
TSAN_TESTS ?= SessionState.*:*PrefillAfterDecode*:KVCache.*:PackedKV.*:Blas.*:Bf16Path.*:ModelForward.*:RangeClaims.*:VectorProduct.Chosen*:Serve*-*Slow*
test-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPATTN_TSAN=ON > /dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target spattn_tests
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ./$(TSAN_BUILD)/bin/spattn_tests --gtest_filter='$(TSAN_TESTS)'

# libFuzzer (clang, ASan + UBSan) on every file parser: GGUF, .npy, .safetensors, calibration
# JSON, the tokenizers on arbitrary text, and quantized blocks of every ggml type against the
# reference decoders; FUZZ_RUNS executions each from generated seeds. ggml (C and C++) is built
# with clang and ASan here, so reads inside its decoders are checked too.
fuzz: deps
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DSPATTN_FUZZ=ON > /dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS)
	@bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_RUNS)

# Lays the C++ sources out as .clang-format says (ctest's code_format checks it).
format: deps
	@bash scripts/check_format.sh --fix

bench: build
	./$(BUILD)/bin/spattn_microbench

clean:
	rm -rf $(BUILD) $(BUILD)-pip $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD) python/build
