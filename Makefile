# The README's two commands: `make run` and `make test`. Both install what
# is missing (scripts/install-deps.sh), configure and build first.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = text_ir npy safetensors vlayout plan_text cluster onnx
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
PREFIX ?= /usr/local

.PHONY: all deps build run test test-asan fuzz install clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job on its embedded default: train a small GPT on Loom's own corpus.
run: build
	./$(BUILD)/loom train

# Tests run side by side, each with its own OpenMP team: passive waiting keeps
# oversubscribed teams from spinning against each other.
test: build
	cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -j $(JOBS)

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer. The
# differential harnesses run the cpu backend only (LOOM_TEST_BACKENDS): the
# OpenCL platform compiles every kernel with an LLVM that runs many times
# slower under the sanitizer's allocator; test_opencl still runs Loom's
# OpenCL host code here, and the Release suite runs every backend. -O1,
# as AddressSanitizer's own documentation advises for speed.
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
	  -DLOOM_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && OMP_WAIT_POLICY=passive LOOM_TEST_QUICK=1 LOOM_TEST_BACKENDS=cpu \
	  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# Each libFuzzer target (tests/fuzz/fuzz_*.c, clang) for FUZZ_SECONDS,
# starting from its checked-in corpus; new inputs go to
# $(FUZZ_BUILD)/corpus/NAME, crashers to $(FUZZ_BUILD)/crashes/NAME/ (add
# them to tests/fuzz/corpus/NAME with the fix: `make test` replays them).
fuzz:
	@bash scripts/install-deps.sh --fuzz
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DLOOM_FUZZ=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) $(addprefix --target fuzz_,$(FUZZ_TARGETS))
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/crashes/$$t; \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  ./$(FUZZ_BUILD)/tests/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=10 \
	    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/crashes/$$t/ \
	    $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t; \
	done

# The header, libloom.a, libloom.so, pkg-config and CMake package files and
# the loom command under PREFIX (README.md, "Loom as a library").
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
