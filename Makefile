# lattice - build, test and demo.
#   make            build build/lattice (CPU backend; CUDA backend too when nvcc is found)
#   make CUDA=0     skip the CUDA backend
#   make test       set-up + build + the whole suite (ends with "N passed, N failed")
#   make demo       set-up + build + sample corpus + train a small GPT + print generated text
#   make deps       install missing Debian packages (when root)
#   make peer-check the PyTorch peer trains the same model (needs torch; PEER_PYTHON)

BUILD    ?= build
CC       ?= gcc
NVCC     ?= nvcc
CUDA     ?= auto
CUDA_ARCH ?= 80 90
OPT      ?= -O3 -march=native
PKGS     := yaml-0.1 libzstd openblas ompi-c

HAVE_PKGS := $(shell pkg-config --exists $(PKGS) 2>/dev/null && echo 1)
ifeq ($(HAVE_PKGS),1)
  DEP_CFLAGS := $(shell pkg-config --cflags $(PKGS))
  DEP_LIBS   := $(shell pkg-config --libs $(PKGS))
endif

CFLAGS  := $(OPT) -g -std=c11 -D_GNU_SOURCE -fopenmp -Wall -Wextra -Wno-unused-parameter \
           -ffp-contract=fast -Wstrict-prototypes -Iinclude $(DEP_CFLAGS) -MMD -MP
LDFLAGS := -fopenmp
LDLIBS  := $(DEP_LIBS) -lpthread -lm

# ---- CUDA probe -------------------------------------------------------------
ifeq ($(CUDA),auto)
  CUDA := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1 || echo 0)
endif
CUDA_SRCS := $(wildcard kernels/cuda/*.cu)
ifeq ($(CUDA),1)
  CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC))))
  NVCCFLAGS := -O3 -std=c++17 -Iinclude -lineinfo --expt-relaxed-constexpr \
               $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
               -Xcompiler -fPIC,-Wall -MMD -MP
  # -isystem: src/comm_nccl.c includes nccl.h (and through it cuda_runtime.h)
  CFLAGS  += -DLT_HAVE_CUDA -isystem $(CUDA_HOME)/include
  CUDA_OBJS := $(patsubst kernels/cuda/%.cu,$(BUILD)/obj/cuda/%.o,$(CUDA_SRCS))
  LDLIBS  += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Wl,-rpath,$(CUDA_HOME)/lib64 \
             -Wl,-rpath,$(CUDA_HOME)/lib -lcublasLt -lcublas -lcudnn -lnccl -lcudart -lstdc++
endif

ifeq ($(CUDA),1)
  $(info lattice: CUDA backend: yes ($(NVCC), arch $(CUDA_ARCH)); CPU backend: yes)
else
  $(info lattice: CUDA backend: no (nvcc not found or CUDA=0); CPU backend: yes)
endif
ifneq ($(HAVE_PKGS),1)
  $(info lattice: some of the libraries $(PKGS) are missing (pkg-config); 'make deps' installs them)
endif

SRCS     := $(filter-out src/main.c,$(wildcard src/*.c)) $(wildcard kernels/cpu/*.c)
OBJS     := $(patsubst %.c,$(BUILD)/obj/%.o,$(SRCS))
LIB      := $(BUILD)/liblattice.a
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))

GPU_TEST_BINS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(wildcard tests/gpu/*.c))

.PHONY: all deps check-deps test test-full demo clean gpu-test peer-check
all: check-deps $(BUILD)/lattice $(TEST_BINS)

deps:
	@scripts/setup.sh

check-deps:
	@scripts/setup.sh --check

# Objects are rebuilt when the flags change (e.g. CUDA=0 <-> CUDA=1).
FLAGS_STAMP := $(BUILD)/flags.$(shell echo '$(CC) $(CFLAGS) $(NVCC) $(NVCCFLAGS)' | cksum | cut -d' ' -f1)
$(FLAGS_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/flags.*
	@touch $@

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/cuda/%.o: kernels/cuda/%.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIB): $(OBJS) $(CUDA_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/lattice: $(BUILD)/obj/src/main.o $(LIB)
	$(CC) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/%.c tests/test.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

# The CUDA backend's kernels also run on the CPU, in a host emulation
# (tests/emu): built wherever the CUDA headers are (nvcc found), run by make
# test like every tests/test_* binary. Everything but the cuBLASLt GEMMs
# (gemm.cu), the runtime glue (backend_cuda.cu, comm_staging.cu) and cuDNN's
# attention (attention_cudnn*.cu; the emulated backend resolves to lattice's).
ifeq ($(CUDA),1)
EMU_DIR  := $(BUILD)/emu
EMU_KERNELS := $(filter-out gemm backend_cuda comm_staging attention_cudnn%,$(patsubst kernels/cuda/%.cu,%,$(CUDA_SRCS)))
EMU_OBJS := $(patsubst %,$(EMU_DIR)/%.o,$(EMU_KERNELS)) $(EMU_DIR)/emu_glue.o
# (include/*.h too: the kernels see backend.h's structs, and a stale object
# built against an older layout crashes the emulation)
EMU_HDRS := $(EMU_DIR)/common.cuh $(EMU_DIR)/attention.cuh kernels/cuda/device.cuh kernels/cuda/ops.cuh \
            $(wildcard include/*.h)
# -w: the rewritten kernels are checked by nvcc -Wall already
EMU_CXXFLAGS := -std=c++20 -O2 -pthread -w -I$(EMU_DIR) -Ikernels/cuda -Iinclude \
                -isystem $(CUDA_HOME)/include
EMU_TEST := $(BUILD)/tests/test_cuda_emu
all: $(EMU_TEST)
$(EMU_DIR)/common.cuh: tests/emu/common.cuh
	@mkdir -p $(dir $@)
	cp $< $@
$(EMU_DIR)/attention.cuh: kernels/cuda/attention.cuh
	@mkdir -p $(dir $@)
	cp $< $@
$(EMU_DIR)/%.cpp: kernels/cuda/%.cu tests/emu/transform.py
	@mkdir -p $(dir $@)
	python3 tests/emu/transform.py $< > $@.tmp && mv $@.tmp $@
$(EMU_DIR)/%.o: $(EMU_DIR)/%.cpp $(EMU_HDRS)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
$(EMU_DIR)/emu_glue.o: tests/emu/emu_glue.cpp $(EMU_HDRS)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
# the host code without the real CUDA objects (the emulated ones replace them)
EMU_LIB := $(EMU_DIR)/liblattice_host.a
$(EMU_LIB): $(OBJS)
	@rm -f $@
	ar rcs $@ $^
$(EMU_TEST): tests/emu/test_cuda_emu.c tests/gpu/test_gpu_ops.c tests/gpu/attn_bound.h tests/test.h \
             $(EMU_OBJS) $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(EMU_OBJS) $(EMU_LIB) $(LDFLAGS) $(LDLIBS) -pthread -o $@
endif

# GPU checks: need a visible GPU; scripts/gpu_check.sh wraps them with a report.
$(BUILD)/tests/gpu/%: tests/gpu/%.c tests/test.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

gpu-test: check-deps $(GPU_TEST_BINS)
	$(BUILD)/tests/gpu/test_gpu_ops && $(BUILD)/tests/gpu/bench_attention

# scripts/bench_peer.py (plain PyTorch GPT-2) against lattice: same init, batches
# and per-step losses (tests/gpu/peer_check.sh). Needs a Python with torch, so
# not part of make test: PEER_PYTHON=/path/bin/python PEER_CHECK_DEVICE=cpu|cuda
peer-check: all
	@bash tests/gpu/peer_check.sh $(BUILD)

# test and demo install packages first, then build in a fresh make (so the
# dependency probe above sees what was just installed).
NPROC := $(shell nproc 2>/dev/null || echo 2)
test:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@tests/run.sh $(BUILD)

# the suite plus every tp x dp x ZeRO x SP layout and a full pipeline matrix
# (pp x vpp x tp x dp x ZeRO): about 2 more minutes on 2 cores
test-full:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@LT_TEST_FULL=1 tests/run.sh $(BUILD)

demo:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)

-include $(OBJS:.o=.d) $(CUDA_OBJS:.o=.d)
