# Thin wrapper for people and CI. The real build is CMake (CMakeLists.txt).
#   make run    set up, build, and run the demo in the sandbox (prints its result and trace)
#   make test   set up, build, and run every test (unit, integration as root and rootless, docs, VM)
#   make deb    build a Debian package (CPack) in $(BUILD_DIR): sbx_VERSION_ARCH.deb
#   make test-asan  the unit and integration suites once more, built with ASan and UBSan (build-asan)
#   make fuzz   build the libFuzzer targets with clang (build-fuzz) and fuzz each for FUZZ_SECONDS
#               (default 60); a crash fails it and is kept in build-fuzz/fuzz-crashes/TARGET/
#   make soak   soak and kill test (tests/soak/soak.py, SOAK_ARGS): runs, random SIGKILLs and SIGTERMs,
#               concurrent runs, cancelled MCP calls, then the invariants; ~5 min on 2 cores. Not in CI
BUILD_DIR ?= build
PREFIX    ?= /usr/local
DESTDIR   ?=
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
# ctest runs this many tests side by side (the long ones first: CMakeLists.txt, COST).
CTEST_JOBS ?= 2
CMAKE_FLAGS ?=
# Warnings are errors in every build made here, a developer's as CI's (the code builds clean with
# Debian 12's GCC); CMake's own default stays off for packagers whose newer compilers warn anew.
CMAKE_FLAGS += -DSBX_WERROR=ON

# Debian packages, in two sets (see `make deps`, `make deps-test`; README.md, "Set-up").
# RUN_DEB_PACKAGES: what building sbx and running `make run`'s demo need -- the compiler and the
# -dev libraries sbx links statically, doctest (the unit-test binary is part of `make build`), and
# busybox-static (the demo's rule pack runs on the busybox image, rootfs/build-busybox.sh);
# libpq-dev and postgresql-server-dev-15 (libpq's .a and the two archives it needs: the trace
# database, runtime/record/pg_client.cpp).
RUN_DEB_PACKAGES = g++ cmake make pkg-config ccache \
  libcli11-dev libseccomp-dev libcap-ng-dev libc-ares-dev nlohmann-json3-dev libspdlog-dev libfmt-dev doctest-dev \
  libre2-dev libssl-dev zlib1g-dev liblzma-dev libzstd-dev libbz2-dev libsqlite3-dev libboost-dev \
  libpq-dev postgresql-server-dev-15 busybox-static
# TEST_DEB_PACKAGES: only the tests use these, on top of the run set: the JSON Schema test suite and
# python3 (unit and integration harness, trace validation), the test user (passwd), network and
# process tools, man/groff (docs checks), curl (egress proxy tests), jq (the docs' examples),
# zsh/fish (completion checks), clang-format-14 (ctest format, .clang-format), compressors and cpio (image and VM tests), qemu (the cgroup v2
# guest, tests/vm), chromium (the browser workload of tests/integration/test_memory_fallback.py),
# nodejs (the MCP SDK client of tests/mcp; npm is added by `make mcp-test-deps` only where no npm
# exists: a nodejs package that bundles its own npm conflicts with Debian's), podman, runc, uidmap
# and python3-yaml (deploy/test.sh runs sbx in user-namespaced containers, root and rootless, and
# deploy/k8s/mcp-server.yaml's Deployment, read by deploy/podman-deploy.py; crun refuses this
# host's cgroup set-up; rootless podman needs newuidmap), python3-numpy (tests/integration/test_mcp_warm.py
# preloads it in prepared interpreters: numpy seeds a generator of its own at import),
# python3-ipykernel and python3-jupyter-client (tests/integration/test_kernel.py drives a kernel in an
# sbx session with the real jupyter_client), prometheus (tests/integration/test_mcp_http.py has a real
# Prometheus server scrape `sbx mcp --listen`'s /metrics: the test runs its own on a loopback port; where
# systemd runs, the package also starts its service on :9090: `systemctl disable --now prometheus`),
# postgresql-15 (tests/integration/test_trace_db.py mirrors records into a real PostgreSQL server
# it starts itself: initdb in a temporary directory, a unix socket there; the package's own
# cluster, where its postinst made one, is left alone).
TEST_DEB_PACKAGES = json-schema-test-suite python3 python3-jsonschema procps iproute2 util-linux passwd \
  man-db groff-base curl jq zsh fish clang-format-14 \
  qemu-system-x86 cpio xz-utils zstd bzip2 \
  chromium nodejs podman runc uidmap python3-yaml python3-numpy python3-ipykernel python3-jupyter-client prometheus \
  postgresql-15
# BENCH_DEB_PACKAGES: only `make bench` (bench/README.md): hyperfine, and bubblewrap to compare with.
BENCH_DEB_PACKAGES = hyperfine bubblewrap linux-perf

# Only for `make fuzz`, on top of the run and test sets: clang and its libFuzzer and sanitizer runtimes.
FUZZ_DEB_PACKAGES = clang-14 libclang-rt-14-dev
FUZZ_DIR     ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
ASAN_DIR     ?= build-asan
# e.g. SOAK_ARGS="--runs 10000 --kills 1320 --terms 990 --concurrency 300 --mcp-calls 2000 --mcp-cancels 145"
SOAK_ARGS    ?=

export CCACHE_NOHASHDIR := 1

.PHONY: all deps deps-test deps-bench build run test unit bench install deb clean fuzz fuzz-deps test-asan mcp-test-deps soak format
all: build

deps:
	@./tools/install-deps.sh $(RUN_DEB_PACKAGES)

deps-test: deps
	@./tools/install-deps.sh $(TEST_DEB_PACKAGES)

# The official MCP TypeScript SDK (@modelcontextprotocol/sdk, the exact version and its dependencies
# pinned in tests/mcp/package-lock.json) in $(BUILD_DIR)/mcp-node, for the ctest `mcp` (tests/mcp).
mcp-test-deps: deps-test
	@command -v npm >/dev/null 2>&1 || ./tools/install-deps.sh npm
	@./tests/mcp/install.sh $(BUILD_DIR)/mcp-node

deps-bench: deps-test
	@./tools/install-deps.sh $(BENCH_DEB_PACKAGES)

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j$(JOBS)

run: deps build
	@./examples/demo.sh $(BUILD_DIR)/sbx

# The suites' lines interleave and CI shows only the end of the output: on a failure, each failed
# integration suite's "failed tests:" lines (runner.py: file:line and the exception) come last.
test: deps-test mcp-test-deps build
	cd $(BUILD_DIR) && { ctest --output-on-failure --timeout 2400 -j$(CTEST_JOBS) || { \
	  sed -n '/^failed tests:/,/^slowest tests:/p' Testing/Temporary/LastTest.log | grep -v '^slowest tests:' | head -n 40; exit 1; }; }

# The sanitizer pass: GCC, ASan + UBSan (dynamically linked), every report fatal (tests/sanitize.sh);
# -O1, the level ASan is tuned for, compiles much faster than -O2 on a 2-core CI machine.
test-asan: deps-test
	cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DSBX_SANITIZE=ON $(CMAKE_FLAGS)
	cmake --build $(ASAN_DIR) -j$(JOBS)
	./tests/sanitize.sh $(ASAN_DIR)

fuzz-deps: deps
	@./tools/install-deps.sh $(FUZZ_DEB_PACKAGES)

fuzz: fuzz-deps
	cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-14 -DSBX_FUZZ=ON -DBUILD_TESTING=OFF $(CMAKE_FLAGS)
	cmake --build $(FUZZ_DIR) --target fuzz_targets -j$(JOBS)
	FUZZ_SECONDS=$(FUZZ_SECONDS) ./tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_TARGETS)

# Not part of `test` or CI: it takes minutes and judges timing faults (tests/soak/README.md).
soak: build
	python3 tests/soak/soak.py --sbx $(BUILD_DIR)/sbx $(SOAK_ARGS)

# cli/ and runtime/ formatted as .clang-format says (ctest `format` checks it).
format:
	./tests/tools/check_format.sh --fix

unit: build
	$(BUILD_DIR)/sbx_unit_tests

bench: deps-bench build
	./bench/startup.sh $(BUILD_DIR)/sbx
	./bench/image.sh $(BUILD_DIR)/sbx

install: build
	DESTDIR=$(DESTDIR) cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# A Debian package of the build (CPack, see the end of CMakeLists.txt): $(BUILD_DIR)/sbx_VERSION_ARCH.deb.
deb: build
	cd $(BUILD_DIR) && cpack -G DEB

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_DIR) $(ASAN_DIR)
