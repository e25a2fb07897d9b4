# The two commands: `make run` and `make test`.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
# Executions per fuzz target (libFuzzer -runs); not part of ctest.
FUZZ_RUNS  ?= 1000000
JOBS       ?= $(shell nproc)

.PHONY: deps build run test test-sanitize fuzz bench clean

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The default benchmark: every method at its paper defaults against dense on a 16K text
# workload, speedup beside recall (35-60 s on 2 cores).
run: build
	./$(BUILD)/bin/spattn bench

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (tests named *Slow* left out).
test-sanitize: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPATTN_SANITIZE=ON > /dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -E Slow

# libFuzzer (clang, ASan + UBSan) on every file parser: GGUF, .npy, .safetensors, calibration
# JSON, and the tokenizers on arbitrary text; FUZZ_RUNS executions each from generated seeds.
fuzz: deps
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=clang++ -DSPATTN_FUZZ=ON > /dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS)
	@bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_RUNS)

bench: build
	./$(BUILD)/bin/spattn_microbench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
