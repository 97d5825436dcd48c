# Thin wrapper for people and CI. The real build is CMake (CMakeLists.txt).
#   make run    set up, build, and run the demo in the sandbox (prints its result and trace)
#   make test   set up, build, and run every test (unit, integration as root and rootless, docs, VM)
BUILD_DIR ?= build
PREFIX    ?= /usr/local
DESTDIR   ?=
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ifeq ($(CI),true)
CMAKE_FLAGS += -DSBX_WERROR=ON
endif

# Debian packages sbx needs to build, test and benchmark (see `make deps`).
DEB_PACKAGES = g++ cmake make pkg-config ccache \
  libcli11-dev libseccomp-dev libcap-ng-dev libc-ares-dev nlohmann-json3-dev libspdlog-dev libfmt-dev doctest-dev \
  libre2-dev json-schema-test-suite \
  python3 python3-jsonschema procps iproute2 util-linux passwd man-db groff-base curl \
  bubblewrap hyperfine zsh fish \
  qemu-system-x86 busybox-static cpio xz-utils zstd bzip2

export CCACHE_NOHASHDIR := 1

.PHONY: all deps build run test unit bench install clean
all: build

deps:
	@./tools/install-deps.sh $(DEB_PACKAGES)

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j$(JOBS)

run: deps build
	@./examples/demo.sh $(BUILD_DIR)/sbx

test: deps build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 2400

unit: build
	$(BUILD_DIR)/sbx_unit_tests

bench: deps build
	./bench/startup.sh $(BUILD_DIR)/sbx
	./bench/image.sh $(BUILD_DIR)/sbx

install: build
	DESTDIR=$(DESTDIR) cmake --install $(BUILD_DIR) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD_DIR)
