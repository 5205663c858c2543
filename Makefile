# cuda-agent build. `make` builds the CLI and (where nvcc exists) the GPU worker; `make test` runs
# every test that needs no GPU; `make test-gpu` runs the GPU suite (on a machine with a GPU).
# Sources are picked up by directory: one subsystem per folder under src/.

BUILD    ?= build
CC       ?= gcc
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda) /usr)
NVCC     ?= $(shell command -v nvcc 2>/dev/null || echo $(CUDA_HOME)/bin/nvcc)
PYTHON   ?= $(or $(CUDA_AGENT_PYTHON),python3)
WERROR   ?= $(if $(CI),-Werror,)
# GPU code of the worker itself (poison, perturb, checksum kernels): SASS for common targets + PTX.
WORKER_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                  -gencode arch=compute_90,code=compute_90

WARNINGS := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wconversion $(WERROR)
CPPFLAGS = -D_GNU_SOURCE -Isrc -I$(BUILD)/include $(CUDA_INC) -MMD -MP
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c17 $(WARNINGS) -fno-strict-aliasing
LDLIBS   := -lz -ljansson -lmicrohttpd -lgnutls -lhiredis -lcurl -lsqlite3 -lxxhash -lseccomp -ldl -lpthread -lm
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

CORE_DIRS := util tensor task build bridge protocol device eval store import sandbox report bench workspace agent serve synth
CORE_SRC  := $(foreach d,$(CORE_DIRS),$(wildcard src/$(d)/*.c))
CLI_SRC   := $(wildcard src/cli/*.c)
WORKER_C  := $(wildcard src/worker/*.c)
WORKER_CU := $(wildcard src/worker/*.cu)
UNIT_SRC  := $(wildcard tests/unit/test_*.c)
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)

# The supervisor's GPU kernels (src/device/kernels.cu) are embedded in the binary as a fatbin.
DEVICE_FATBIN := $(BUILD)/obj/src/device/kernels.fatbin
DEVICE_BLOB   := $(BUILD)/obj/src/device/fatbin.o
CORE_OBJ  := $(CORE_SRC:%.c=$(BUILD)/obj/%.o) $(DEVICE_BLOB)
CLI_OBJ   := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
ASAN_CORE := $(CORE_SRC:%.c=$(BUILD)/asan/%.o) $(DEVICE_BLOB)
WORKER_OBJ := $(WORKER_C:%.c=$(BUILD)/obj/%.o) $(WORKER_CU:%.cu=$(BUILD)/obj/%.cu.o)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
FUZZ_BIN  := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
# Agent tests against the scripted OpenAI-compatible server (tests/agent/test_*.c; python3, no
# GPU): built and run with the unit tests.
UNIT_BIN  += $(patsubst tests/agent/%.c,$(BUILD)/tests/agent/%,$(wildcard tests/agent/test_*.c))

HAVE_NVCC := $(shell test -x "$(NVCC)" && echo yes)
CUDA_LIBDIRS := $(CUDA_HOME)/lib64 $(CUDA_HOME)/targets/x86_64-linux/lib $(CUDA_HOME)/extras/CUPTI/lib64
CUDA_INC  := -I$(CUDA_HOME)/include -I$(CUDA_HOME)/extras/CUPTI/include


.PHONY: $(BUILD)/.gpu-ready
.PHONY: wxprobe test-wxprobe
.PHONY: test-includes
# No include circles and no arrow running back up (docs/architecture.md, "Which way dependencies
# point"); every reason code registered (src/protocol/reasons.c) and documented.
test-includes:
	python3 scripts/check_includes.py
	python3 scripts/check_reasons.py
.PHONY: all cli worker test test-report-render test-examples test-adversarial-build test-faults-build test-bench-build bench-l2 test-unit test-fuzz test-python test-integration test-gpu test-faults test-adversarial fuzz bench clean headers
all: cli worker

headers: $(BUILD)/include/dlpack/dlpack.h $(BUILD)/include/cuda_agent/abi.h

# Candidates and the worker compile against a copy of the system dlpack.h (the GPU host has none),
# and the public ABI header; both travel with the build folder.
$(BUILD)/include/dlpack/dlpack.h: /usr/include/dlpack/dlpack.h
	@mkdir -p $(dir $@)
	cp $< $@
$(BUILD)/include/cuda_agent/abi.h: include/cuda_agent/abi.h
	@mkdir -p $(dir $@)
	cp $< $@

cli: headers $(BUILD)/cuda-agent
$(BUILD)/cuda-agent: $(CLI_OBJ) $(BUILD)/libca.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libca.a $(LDLIBS)

# No nvcc: an empty fatbin, and the supervisor says it was built without its GPU kernels.
$(DEVICE_FATBIN): src/device/kernels.cu src/device/prep.h
	@mkdir -p $(dir $@)
	$(if $(HAVE_NVCC),$(NVCC) -fatbin -O3 -std=c++17 -Isrc $(WORKER_GENCODE) -o $@ $<,: > $@)
$(DEVICE_BLOB): src/device/fatbin.S $(DEVICE_FATBIN)
	@mkdir -p $(dir $@)
	$(CC) -c -DCA_DEVICE_FATBIN='"$(DEVICE_FATBIN)"' -o $@ $<

$(BUILD)/libca.a: $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/obj/%.o: %.c | headers
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

ifeq ($(HAVE_NVCC),yes)
worker: headers $(BUILD)/cuda-agent-worker
$(BUILD)/obj/src/worker/%.o: src/worker/%.c | headers
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CUDA_INC) $(CFLAGS) -c -o $@ $<
$(BUILD)/obj/%.cu.o: %.cu | headers
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 -Isrc -I$(BUILD)/include $(WORKER_GENCODE) -Xcompiler -fPIC -c -o $@ $<
# Full RELRO (-z now): the worker's GOT is read-only before the candidate is loaded, so a
# candidate cannot redirect the worker's own calls (timers, CUDA runtime) by patching it.
$(BUILD)/cuda-agent-worker: $(WORKER_OBJ) $(BUILD)/libca.a
	$(CC) $(CFLAGS) -Wl,-z,relro,-z,now -o $@ $(WORKER_OBJ) $(BUILD)/libca.a \
	  $(addprefix -L,$(CUDA_LIBDIRS)) $(addprefix -Wl$(comma)-rpath$(comma),$(CUDA_LIBDIRS)) \
	  -lcudart -lcupti -lstdc++ $(LDLIBS)
else
worker:
	@echo "nvcc not found: the GPU worker is not built (set NVCC or CUDA_HOME)"
endif
comma := ,

# ---- tests (no GPU) ---------------------------------------------------------------------------
$(BUILD)/asan/%.o: %.c | headers
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN) -c -o $@ $<
$(BUILD)/asan/libca.a: $(ASAN_CORE)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/asan/libca.a | headers
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(SAN) -o $@ $< $(BUILD)/asan/libca.a -lcmocka $(LDLIBS)
# The worker's plan parser and events, tested without a GPU against the supervisor's judge.
$(BUILD)/tests/test_worker: tests/unit/test_worker.c src/worker/plan.c src/worker/events.c $(BUILD)/asan/libca.a | headers
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(SAN) -o $@ $< src/worker/plan.c src/worker/events.c $(BUILD)/asan/libca.a -lcmocka $(LDLIBS)
$(BUILD)/tests/agent/%: tests/agent/%.c $(BUILD)/asan/libca.a | headers
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(SAN) -o $@ $< $(BUILD)/asan/libca.a -lcmocka $(LDLIBS)

# The safetensors cross-check with Python runs when $(PYTHON) has torch and safetensors (the
# venv of scripts/setup.sh); otherwise that one test is skipped and says so.
TEST_PYTHON = $(shell $(PYTHON) -c 'import torch, safetensors' >/dev/null 2>&1 && echo $(PYTHON))
test-unit: $(UNIT_BIN) cli wxprobe
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; \
	  CA_TEST_NVCC="$(if $(HAVE_NVCC),$(NVCC),)" CA_BUILD="$(abspath $(BUILD))" CA_TEST_PYTHON="$(TEST_PYTHON)" \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $$t; done

# The W^X measurement probe (tests/sandbox/wxprobe.c): an LD_PRELOAD object that needs only libc,
# so it builds on the GPU host too; tests/sandbox/wxprobe.sh runs a command under it and prints
# what the sandbox's W^X layers would refuse. test-wxprobe checks it on this machine (no GPU).
wxprobe: $(BUILD)/tests/sandbox/wxprobe.so
$(BUILD)/tests/sandbox/wxprobe.so: tests/sandbox/wxprobe.c
	@mkdir -p $(dir $@)
	$(CC) -D_GNU_SOURCE $(CFLAGS) -fPIC -shared -fvisibility=hidden -o $@ $< -ldl -lpthread
test-wxprobe: wxprobe
	CA_BUILD="$(abspath $(BUILD))" bash tests/sandbox/wxprobe_check.sh

# libFuzzer targets: clang, each run briefly over its seed corpus in `make test`.
FUZZ_CC ?= clang
$(BUILD)/fuzz/%: tests/fuzz/%.c $(CORE_SRC) $(DEVICE_BLOB) | headers
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) -std=c17 -g -O1 -fsanitize=fuzzer,address,undefined -o $@ $< $(CORE_SRC) $(DEVICE_BLOB) $(LDLIBS)
fuzz: $(FUZZ_BIN)
FUZZ_SECONDS ?= 15
test-fuzz: $(FUZZ_BIN)
	@set -e; for f in $(FUZZ_BIN); do n=$$(basename $$f); mkdir -p $(BUILD)/fuzz/corpus-$$n; \
	  echo "== $$n ($(FUZZ_SECONDS) s)"; \
	  if $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=0 -artifact_prefix=$(BUILD)/fuzz/ \
	      $(BUILD)/fuzz/corpus-$$n tests/fuzz/corpus/$$n >$(BUILD)/fuzz/$$n.log 2>&1; then \
	    tail -n 1 $(BUILD)/fuzz/$$n.log; \
	  else tail -n 30 $(BUILD)/fuzz/$$n.log; echo "FAIL: $$n found a crash (see $(BUILD)/fuzz/)"; exit 1; fi; done

test-python:
	cd python && $(PYTHON) -m ruff check . ../scripts/check_includes.py ../scripts/check_reasons.py && $(PYTHON) -m mypy && $(PYTHON) -m mypy --strict ../scripts/check_includes.py ../scripts/check_reasons.py && $(PYTHON) -m pytest -q tests

test-integration: all
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/integration/run.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/integration/bench.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/integration/torch_formats.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/integration/protocol_cpu.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/integration/workspace.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/integration/serve.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/integration/fleet.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/integration/apifuzz.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/integration/synth.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/integration/build_sandbox.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/agent/solve.sh

# The HTML report drawn by headless Chromium: its DOM and a screenshot checked against a fixture's
# hand-computed numbers (tests/report; needs chromium, which scripts/setup.sh installs; no GPU).
test-report-render: cli
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/report/render_check.sh

# The example solutions' logic on the CPU: their kernels run as CPU threads under ASan/UBSan
# through the real ABI, against each task's model.py (examples/emu/).
test-examples: headers
	$(PYTHON) examples/emu/check_solutions.py

# Every adversarial and honest candidate through the real build driver (no GPU needed).
test-adversarial-build: all
	PYTHON="$(PYTHON)" bash tests/adversarial/check_build.sh

# Every fault candidate (tests/faults) compiles with the real build driver (no GPU needed).
test-faults-build: all
	PYTHON="$(PYTHON)" bash tests/faults/check_build.sh

# The benchmark programs compile (bench/l2state.cu; nothing runs without a GPU).
test-bench-build:
	@if [ -n "$(HAVE_NVCC)" ]; then mkdir -p $(BUILD)/bench && \
	  $(NVCC) -O3 -std=c++17 -arch=sm_90 -Werror all-warnings -o $(BUILD)/bench/l2state bench/l2state.cu && \
	  echo "bench/l2state.cu compiles"; else echo "SKIP: no nvcc, bench/l2state.cu not compiled"; fi

test: test-includes test-unit test-wxprobe test-fuzz test-python test-integration test-report-render test-examples test-adversarial-build test-faults-build test-bench-build

# The GPU suite and the benchmarks use the binaries in $(BUILD); they do not rebuild, so that a
# build made on a development machine can be carried to a GPU host without -dev packages.
GPU_BINS := $(BUILD)/cuda-agent $(BUILD)/cuda-agent-worker $(BUILD)/include/cuda_agent/abi.h
$(BUILD)/.gpu-ready:
	@for f in $(GPU_BINS); do [ -e $$f ] || { echo "missing $$f: run make first"; exit 1; }; done
test-gpu: | $(BUILD)/.gpu-ready
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/gpu/run.sh
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/gpu/torch_formats.sh
	CA_GPU=1 CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/agent/solve.sh

# The fault suite (tests/faults): crashes, hangs, exhaustion and escapes, each followed by a good
# evaluation on the same GPU; sandboxed by default (FAULT_EVAL_FLAGS).
test-faults: | $(BUILD)/.gpu-ready
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/faults/run.sh

# The adversarial suite (tests/adversarial): every cheat rejected, every honest kernel passing.
test-adversarial: | $(BUILD)/.gpu-ready
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash tests/adversarial/run.sh

bench: | $(BUILD)/.gpu-ready
	CA_BUILD="$(abspath $(BUILD))" PYTHON="$(PYTHON)" bash bench/run.sh

# How the cache state before a timed call changes a kernel's time, against ncu (needs nvcc, ncu).
bench-l2:
	bash bench/l2state.sh

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
