# hotstack: the two front doors for people (`make run`, `make test`) and the build of generated files.
PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
BPF_DIR := src/hotstack/bpf
BPF_SOURCES := $(wildcard $(BPF_DIR)/*.bpf.c)
# Each program is built for x86-64 (NAME.bpf.o) and arm64 (NAME.arm64.bpf.o); hotstack.bpf.object_path
# picks one by the machine. The register layouts differ (bpf/arch.h); each build reads the UAPI headers
# of its architecture: the host's own for x86-64, Debian's linux-libc-dev-arm64-cross (headers only,
# architecture-independent, no cross compiler) for arm64. Debian multiarch paths, not `uname -m`:
# the objects must come out the same on any build host.
BPF_OBJECTS := $(BPF_SOURCES:.c=.o) $(BPF_SOURCES:.bpf.c=.arm64.bpf.o)
CLANG ?= clang
X86_INCLUDE := /usr/include/x86_64-linux-gnu
ARM64_INCLUDE := /usr/aarch64-linux-gnu/include

.PHONY: run test test-peers test-kernels test-runtimes check-runtime-table test-arm64 venv generate bpf proto check-generated clean

# Profile this host for 10 seconds and print the hottest stacks (needs root).
run: venv
	$(VENV)/bin/hotstack run profile_cpu --host --timeout 10 --map-fetch-interval 0

# The whole test suite, as root, against the real kernel, with every peer it needs installed first
# (the same install scripts as CI; a missing peer is a failure, never a skip). Only tests marked
# `shares` (they measure shares of samples or timings on a real, possibly busy, machine) run once
# more when they fail (reported as a rerun; tests/conftest.py); exact-count tests never do.
test: venv test-peers
	$(VPY) -m pytest -ra tests

# Compilers, perf, bpftool, the OpenTelemetry Collectors, Chromium... (cached; seconds once installed).
test-peers:
	bash .ci/install-test-peers

# The kernel matrix (tests/kernels/matrix.py): Debian's 5.10, 6.1 and 6.12 kernels booted under qemu
# (TCG) and this host's kernel, each running the smoke suite; a table at the end. Needs root and
# what .ci/install.d/kernels.sh installs. Fails if an item expected.json says passes did not.
test-kernels: venv
	bash .ci/install.d/kernels.sh
	$(VPY) tests/kernels/matrix.py $(KERNELS_ARGS)

# The runtime matrix (issue 44): each runtime of Debian 11, 12, 13 and unstable (root filesystems by
# .ci/install.d/rootfs.sh, cached) and of registry builds (Node.js from npm and PyPI, Temurin from PyPI)
# profiled in Docker containers, Debian's also in plain chroots, Debian 13's in mount namespaces; a
# table with each cell's seconds. Fails if a cell did worse than tests/runtimes/expected.json says,
# or if the README's table and runtimes/versions.py do not match it. Needs root, Debian's docker.io
# and npm (rootfs.sh installs it: its client fetches the official Node.js builds).
test-runtimes: venv check-runtime-table
	bash .ci/install.d/rootfs.sh
	$(VPY) tests/runtimes/matrix.py $(RUNTIMES_ARGS)

check-runtime-table:
	$(VPY) tests/runtimes/matrix.py --check-versions

# The same smoke suite on arm64: Debian's arm64 kernel in qemu-system-aarch64 (TCG) on an arm64
# Debian root filesystem (mmdebstrap), hotstack from a wheel of this tree (tests/kernels/arm64.py).
# Slow (every instruction emulated): not in .ci/run. Needs root.
test-arm64: venv
	HOTSTACK_ARM64=1 bash .ci/install.d/arm64.sh
	$(VPY) tests/kernels/arm64.py $(ARM64_ARGS)

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[test]'
	touch $@

# The C header and the Python module that describe what the BPF programs and the engine share
# (records, enums, map and variable names), from the one schema file.
generate: venv
	$(VPY) -m hotstack.bpf.generate

# Rebuild the committed BPF objects from their C sources (Debian's clang, no kernel headers needed).
# Debug info is dropped and .BTF kept (map definitions live there); .BTF.ext is dropped because it
# would embed the build directory.
bpf: $(BPF_OBJECTS)

$(BPF_DIR)/%.arm64.bpf.o: $(BPF_DIR)/%.bpf.c $(wildcard $(BPF_DIR)/*.h)
	@test -e $(ARM64_INCLUDE)/asm/ptrace.h || { echo "make bpf: no arm64 UAPI headers in $(ARM64_INCLUDE): apt-get install linux-libc-dev-arm64-cross" >&2; exit 2; }
	cd $(BPF_DIR) && $(CLANG) -O2 -g -target bpf -D__TARGET_ARCH_arm64 -fdebug-prefix-map=$$PWD=. \
		-nostdinc -isystem $(ARM64_INCLUDE) -isystem /usr/include \
		-Wall -Werror -c $*.bpf.c -o $*.arm64.bpf.tmp.o
	llvm-objcopy --strip-debug --remove-section=.BTF.ext --remove-section=.rel.BTF.ext \
		--remove-section=.llvm_addrsig $(BPF_DIR)/$*.arm64.bpf.tmp.o $@
	rm -f $(BPF_DIR)/$*.arm64.bpf.tmp.o

$(BPF_DIR)/%.bpf.o: $(BPF_DIR)/%.bpf.c $(wildcard $(BPF_DIR)/*.h)
	cd $(BPF_DIR) && $(CLANG) -O2 -g -target bpf -D__TARGET_ARCH_x86 -fdebug-prefix-map=$$PWD=. \
		-I$(X86_INCLUDE) -Wall -Werror -c $*.bpf.c -o $*.bpf.tmp.o
	llvm-objcopy --strip-debug --remove-section=.BTF.ext --remove-section=.rel.BTF.ext \
		--remove-section=.llvm_addrsig $(BPF_DIR)/$*.bpf.tmp.o $@
	rm -f $(BPF_DIR)/$*.bpf.tmp.o

# Protobuf modules (OTLP profiles per wire layout, pprof, Pyroscope push) from our own .proto files,
# with the protoc that grpcio-tools (pinned in the test extra) bundles.
PROTO_SOURCES := $(wildcard src/hotstack/profile/otlp/*.proto src/hotstack/profile/*.proto src/hotstack/export/*.proto)
proto: venv
	$(VPY) -m grpc_tools.protoc -Isrc --python_out=src $(PROTO_SOURCES)

# CI: the committed objects must be what their sources build into.
check-generated:
	$(MAKE) generate
	git diff --exit-code -- $(BPF_DIR)/schema.h $(BPF_DIR)/schema.py
	touch $(BPF_SOURCES)
	$(MAKE) bpf
	git diff --exit-code -- $(BPF_DIR)
	$(MAKE) proto
	git diff --exit-code -- $(PROTO_SOURCES:.proto=_pb2.py)

clean:
	rm -rf $(VENV) build *.egg-info
