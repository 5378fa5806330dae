# eddy - top-level entry points.  The real build is CMake; this file only
# makes the two promised commands work on a fresh Debian 12 machine:
#   make demo    install what is missing, build, run the demo instance
#   make check   install what is missing, build, run every test
PREFIX ?= /usr/local
BUILD ?= build
BUILD_ASAN ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build build-asan check check-unit check-asan demo install \
        valgrind fuzz bench format format-check clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: deps $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

# Every test again with the whole tree (daemons too) under AddressSanitizer
# and UBSan; the bats helper fails a suite whose brokers print a report.
build-asan: deps
	cmake -S . -B $(BUILD_ASAN) -DEDDY_ASAN=ON -DEDDY_UBSAN=ON \
	      -DCMAKE_BUILD_TYPE=Debug
	cmake --build $(BUILD_ASAN) -j $(JOBS)

check: build build-asan format-check
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1 \
	    ctest --output-on-failure -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	scripts/valgrind-check $(BUILD)

check-unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit -j $(JOBS)

demo: build
	@scripts/demo $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# The daemons under valgrind: a small instance runs exec and ping while
# every broker runs under memcheck; any leak or error fails.
valgrind: build
	@scripts/valgrind-check $(BUILD)

fuzz: deps
	CC=clang cmake -S . -B build-fuzz -DEDDY_FUZZ=ON -DEDDY_UNIT_ONLY=ON \
	    -DEDDY_ASAN=ON
	cmake --build build-fuzz -j $(JOBS)
	@scripts/run-fuzzers build-fuzz $(FUZZ_SECONDS)

bench: build
	@bench/run $(BUILD)
	@echo; bench/mpir $(BUILD)
	@echo; bench/tools $(BUILD)
	@echo; bench/stack $(BUILD)
	@echo; bench/alloc $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	@scripts/format-check

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-fuzz
