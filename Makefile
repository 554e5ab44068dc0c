# lattice - build, test and demo.
#   make            build build/lattice (CPU backend; CUDA backend too when nvcc is found)
#   make CUDA=0     skip the CUDA backend
#   make test       set-up + build + the whole suite (ends with "N passed, N failed")
#   make demo       set-up + build + sample corpus + train a small GPT + print generated text
#                   (DEMO_CONFIG=configs/llama-demo.yaml: the same with the Llama block)
#   make deps       install missing Debian packages (when root)
#   make peer-check the PyTorch peer trains the same model (needs torch; PEER_PYTHON)
#   make hf-check   lattice import/export against transformers itself (needs torch and
#                   transformers; HF_PYTHON)

BUILD    ?= build
CC       ?= gcc
CUDA     ?= auto
OPT      ?= -O3 -march=native
PKGS     := yaml-0.1 libzstd openblas ompi-c
# scripts/bundle_deps.sh's copy of libyaml, zstd, OpenBLAS and Open MPI, for a
# machine without those packages (a GPU machine with only CUDA)
DEPS     ?= build/deps
# BLAS: auto (OpenBLAS from the system or the bundle, else numpy's), openblas,
# or numpy: the OpenBLAS numpy's wheels ship (numpy.libs/libscipy_openblas64_,
# 64-bit integers, renamed symbols: kernels/cpu/blas.h), found through
# NUMPY_PYTHON (default python3). A GPU machine with PyTorch has it, so the
# bundle can leave OpenBLAS out (scripts/bundle_deps.sh --no-blas).
BLAS     ?= auto
NUMPY_PYTHON ?= python3

# ---- libyaml, zstd, OpenBLAS, Open MPI -------------------------------------
# from the system (pkg-config), else from the bundle in $(DEPS) (read without
# pkg-config; linked with an rpath to it, so nothing needs LD_LIBRARY_PATH)
# bundle_libs PACKAGES: the -L/-rpath/-l flags of the bundle's pkg-config files
bundle_libs = -L$(abspath $(DEPS))/lib -Wl,-rpath,$(abspath $(DEPS))/lib \
              $(filter -l%,$(shell sed -n 's/^Libs://p' $(foreach p,$(1),$(DEPS)/pkgconfig/$(p).pc)))
# in_bundle PACKAGES: 1 when the bundle has every one of them
in_bundle = $(and $(wildcard $(DEPS)/lib),$(filter $(words $(1)),$(words $(wildcard $(foreach p,$(1),$(DEPS)/pkgconfig/$(p).pc)))))
HAVE_PKGS :=
ifneq ($(BLAS),numpy)
  ifeq ($(shell pkg-config --exists $(PKGS) 2>/dev/null && echo 1),1)
    HAVE_PKGS  := 1
    DEP_CFLAGS := $(shell pkg-config --cflags $(PKGS))
    DEP_LIBS   := $(shell pkg-config --libs $(PKGS))
    DEP_FROM   := the system (pkg-config)
  else ifneq ($(call in_bundle,$(PKGS)),)
    HAVE_PKGS  := 1
    DEP_CFLAGS := -I$(abspath $(DEPS))/include
    DEP_LIBS   := $(call bundle_libs,$(PKGS))
    DEP_FROM   := the bundle $(abspath $(DEPS)) (scripts/bundle_deps.sh)
  endif
endif
ifeq ($(HAVE_PKGS)$(filter openblas,$(BLAS)),)
  # numpy's OpenBLAS, with the other three from the system or the bundle
  BASE_PKGS := $(filter-out openblas,$(PKGS))
  NUMPY_BLAS := $(shell $(NUMPY_PYTHON) -c 'import glob, os, importlib.util as u; d = os.path.join(os.path.dirname(os.path.dirname(u.find_spec("numpy").origin)), "numpy.libs"); print((sorted(glob.glob(d + "/libscipy_openblas64_*.so")) + [""])[0])' 2>/dev/null)
  ifneq ($(NUMPY_BLAS),)
    BLAS_FLAGS := -DLT_BLAS_SCIPY64
    BLAS_LIBS  := -L$(dir $(NUMPY_BLAS)) -Wl,-rpath,$(dir $(NUMPY_BLAS)) -l:$(notdir $(NUMPY_BLAS))
    ifeq ($(shell pkg-config --exists $(BASE_PKGS) 2>/dev/null && echo 1),1)
      HAVE_PKGS  := 1
      DEP_CFLAGS := $(shell pkg-config --cflags $(BASE_PKGS)) $(BLAS_FLAGS)
      DEP_LIBS   := $(shell pkg-config --libs $(BASE_PKGS)) $(BLAS_LIBS)
      DEP_FROM   := the system (pkg-config), BLAS from numpy ($(NUMPY_BLAS))
    else ifneq ($(call in_bundle,$(BASE_PKGS)),)
      HAVE_PKGS  := 1
      DEP_CFLAGS := -I$(abspath $(DEPS))/include $(BLAS_FLAGS)
      DEP_LIBS   := $(call bundle_libs,$(BASE_PKGS)) $(BLAS_LIBS)
      DEP_FROM   := the bundle $(abspath $(DEPS)), BLAS from numpy ($(NUMPY_BLAS))
    endif
  endif
endif

CFLAGS  := $(OPT) -g -std=c11 -D_GNU_SOURCE -fopenmp -Wall -Wextra -Wno-unused-parameter \
           -ffp-contract=fast -Wstrict-prototypes -Iinclude -Isrc $(DEP_CFLAGS) -MMD -MP
LDFLAGS := -fopenmp
LDLIBS  := $(DEP_LIBS) -lpthread -lm

# ---- CUDA probe -------------------------------------------------------------
# nvcc and the libraries come from a CUDA toolkit (NVCC=..., CUDA_HOME=DIR, nvcc
# on PATH, /usr/local/cuda) or from pip wheels, as PyTorch installs them:
# site-packages/nvidia/<pkg>/{bin,include,lib} with only versioned libraries
# (libcudart.so.13, no libcudart.so). CUDA_WHEELS=DIR names such nvidia/
# folders; otherwise they are looked up next to a wheel's nvcc, in python3's
# sys.path and in the usual virtual-environment places, whenever the toolkit
# lacks a library. Each library is linked by its full versioned path with an
# rpath to its folder, so the binary runs without LD_LIBRARY_PATH.
# Linked: cudart, NCCL and cuDNN (attention through its backend API; its
# version reported by --version). cuBLASLt (the GEMMs) and cuBLAS (its grouped
# GEMM, for the MoE experts) are found the same way but opened with dlopen when
# the CUDA backend creates a device (kernels/cuda/cublas_load.cu): linked, their
# static initialisers cost every process 0.3 s, a CPU run or a plan included.
# Fat binaries: SASS for each CUDA_ARCH and PTX for each CUDA_PTX (JIT-compiled
# by the driver on newer GPUs). No kernel uses Hopper-only instructions
# (wgmma, setmaxnreg, TMA), so there is no sm_90a target.
CUDA_LIBS := cudart cublasLt cublas cudnn nccl
CUDA_SRCS := $(wildcard kernels/cuda/*.cu)
lt_comma  := ,
lt_empty  :=
lt_space  := $(lt_empty) $(lt_empty)
CUDA_ARCH ?= 80 90
CUDA_PTX  ?= 90
CUDA_WHEELS ?=
ifeq ($(CUDA),auto)
  ifeq ($(NVCC),)
    NVCC := $(if $(CUDA_HOME),$(wildcard $(CUDA_HOME)/bin/nvcc),$(firstword \
              $(wildcard $(addsuffix /*/bin/nvcc,$(CUDA_WHEELS))) $(shell command -v nvcc 2>/dev/null)))
  endif
  # pip wheels: the nvidia/ folders on python3's path and in usual venv places
  lt_py_wheels = $(shell python3 -c 'import os, sys; print(" ".join(sorted({os.path.realpath(os.path.join(p, "nvidia")) for p in sys.path if os.path.isdir(os.path.join(p, "nvidia"))})))' 2>/dev/null) \
    $(realpath $(wildcard /opt/*/.venv/lib/python3*/site-packages/nvidia /opt/*/venv/lib/python3*/site-packages/nvidia \
      /usr/local/lib/python3*/dist-packages/nvidia /usr/lib/python3/dist-packages/nvidia))
  ifeq ($(NVCC),)
    CUDA_WHEELS := $(or $(CUDA_WHEELS),$(lt_py_wheels))
    NVCC := $(firstword $(wildcard $(addsuffix /*/bin/nvcc,$(CUDA_WHEELS))) $(wildcard /usr/local/cuda/bin/nvcc))
  endif
  CUDA := $(if $(NVCC),1,0)
endif
ifeq ($(CUDA),1)
  NVCC ?= nvcc
  NVCC_REAL := $(realpath $(or $(wildcard $(NVCC)),$(shell command -v $(NVCC) 2>/dev/null)))
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC_REAL))
  # a wheel's nvcc (.../nvidia/cu13/bin/nvcc): its sibling packages are wheels too
  ifneq ($(filter %/nvidia/,$(dir $(CUDA_HOME))),)
    CUDA_WHEELS := $(CUDA_WHEELS) $(dir $(CUDA_HOME))
  endif
  lt_lib_dirs = $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib $(CUDA_HOME)/targets/x86_64-linux/lib \
                $(wildcard $(addsuffix /*/lib,$(CUDA_WHEELS))) /usr/lib/x86_64-linux-gnu /usr/lib64
  # $(call lt_find_lib,NAME): DIR/libNAME.so.N (the soname) in the first folder that has it
  lt_find_lib = $(firstword $(foreach d,$(lt_lib_dirs),$(firstword $(sort $(wildcard $(d)/lib$(1).so.[0-9]*)) $(wildcard $(d)/lib$(1).so))))
  lt_find_all = $(foreach l,$(CUDA_LIBS),$(eval CUDA_LIB_$(l) := $(call lt_find_lib,$(l))))
  $(lt_find_all)
  CUDA_LIB_FILES = $(foreach l,$(CUDA_LIBS),$(CUDA_LIB_$(l)))
  ifneq ($(words $(CUDA_LIB_FILES)),$(words $(CUDA_LIBS)))
    CUDA_WHEELS := $(CUDA_WHEELS) $(lt_py_wheels)
    $(lt_find_all)
  endif
  lt_uniq = $(if $(1),$(firstword $(1)) $(call lt_uniq,$(filter-out $(firstword $(1)),$(1))))
  CUDA_LIB_DIRS := $(call lt_uniq,$(patsubst %/,%,$(dir $(CUDA_LIB_FILES))))
  # headers: the toolkit's, and an include/ beside each library folder (wheels)
  CUDA_INC_DIRS := $(call lt_uniq,$(wildcard $(CUDA_HOME)/include \
                     $(patsubst %/lib,%/include,$(filter %/lib,$(CUDA_LIB_DIRS:%/lib64=%/lib)))))
  # CCCL's nv/target (cuda_fp16.h includes it, through cuda_bf16.h and nccl.h):
  # nvcc adds a toolkit's include/cccl by itself, the C compiler needs it named
  # (CUDA_CCCL=DIR, the folder that holds nv/target)
  CUDA_CCCL ?= $(patsubst %/nv/target,%,$(firstword $(foreach d,$(CUDA_INC_DIRS),$(wildcard $(d)/nv/target $(d)/cccl/nv/target))))
  CUDA_INC_DIRS += $(filter-out $(CUDA_INC_DIRS),$(CUDA_CCCL))
  CUDA_INC      := $(addprefix -isystem ,$(CUDA_INC_DIRS))
  # NVTX3 (header-only; src/observability/trace.c's ranges): in the toolkit's include/, or
  # a wheel's (nvidia-nvtx); without it the build has no NVTX ranges
  CUDA_NVTX := $(firstword $(foreach d,$(CUDA_INC_DIRS) $(wildcard $(addsuffix /*/include,$(CUDA_WHEELS))),$(wildcard $(d)/nvtx3/nvToolsExt.h)))
  CUDA_TARGETS  := $(addprefix sm_,$(CUDA_ARCH)) $(addprefix compute_,$(CUDA_PTX))
  NVCCFLAGS := -O3 -std=c++17 -Iinclude $(CUDA_INC) -lineinfo --expt-relaxed-constexpr \
               $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
               $(foreach a,$(CUDA_PTX),-gencode arch=compute_$(a),code=compute_$(a)) \
               -DLT_CUDA_TARGETS=$(subst $(lt_space),+,$(strip $(CUDA_TARGETS))) \
               -DLT_CUBLASLT_LIB=\"$(CUDA_LIB_cublasLt)\" -DLT_CUBLAS_LIB=\"$(CUDA_LIB_cublas)\" \
               -Xcompiler -fPIC,-Wall -MMD -MP
  # -isystem: src/comm/comm_nccl.c includes nccl.h (and through it cuda_runtime.h)
  CFLAGS  += -DLT_HAVE_CUDA $(CUDA_INC) $(if $(CUDA_NVTX),-DLT_HAVE_NVTX $(addprefix -isystem ,$(filter-out $(CUDA_INC_DIRS),$(patsubst %/nvtx3/nvToolsExt.h,%,$(CUDA_NVTX)))))
  CUDA_OBJS := $(patsubst kernels/cuda/%.cu,$(BUILD)/obj/cuda/%.o,$(CUDA_SRCS))
  CUDA_RES  := $(CUDA_OBJS:.o=.res)
  LDLIBS  += $(filter-out $(CUDA_LIB_cublasLt) $(CUDA_LIB_cublas),$(CUDA_LIB_FILES)) $(addprefix -Wl$(lt_comma)-rpath$(lt_comma),$(CUDA_LIB_DIRS)) -lstdc++ -ldl
endif
# one line per dependency: what was found where
ifeq ($(CUDA),1)
  $(info lattice: CUDA backend: yes; nvcc $(NVCC_REAL) ($(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'))$(if $(filter %/nvidia/,$(dir $(CUDA_HOME))), from pip wheels); SASS $(addprefix sm_,$(CUDA_ARCH)), PTX $(addprefix compute_,$(CUDA_PTX)))
  $(foreach l,$(CUDA_LIBS),$(info lattice: lib$(l): $(or $(CUDA_LIB_$(l)),NOT FOUND (toolkit $(CUDA_HOME), wheels: $(or $(strip $(CUDA_WHEELS)),none; set CUDA_WHEELS=.../site-packages/nvidia)))))
  $(info lattice: NVTX ranges (logging.trace's spans for Nsight Systems): $(or $(CUDA_NVTX),no: nvtx3/nvToolsExt.h not found (a toolkit has it; wheels: nvidia-nvtx)))
  $(info lattice: CCCL headers (nv/target): $(or $(CUDA_CCCL),NOT FOUND in $(strip $(CUDA_INC_DIRS)) (a toolkit has them; wheels: nvidia-cuda-cccl; or CUDA_CCCL=DIR)))
  ifneq ($(and $(CUDA_CCCL),$(filter $(words $(CUDA_LIBS)),$(words $(CUDA_LIB_FILES)))),)
  else ifneq ($(filter-out clean deps check-deps print-%,$(or $(MAKECMDGOALS),all)),)
    $(error lattice: a CUDA library or header is missing (above); set CUDA_HOME, CUDA_WHEELS or CUDA_CCCL, or build without CUDA: make CUDA=0)
  endif
else
  $(info lattice: CUDA backend: no (nvcc not found or CUDA=0); CPU backend: yes)
endif
ifeq ($(HAVE_PKGS),1)
  $(info lattice: $(PKGS): from $(DEP_FROM))
else
  $(info lattice: some of the libraries $(PKGS) are missing (pkg-config, no bundle in $(DEPS)); 'make deps' installs them)
endif

# src/<concept>/*.c (one folder per concept; src/main.c is the command line)
SRC_DIRS := $(sort $(dir $(wildcard src/*/*.c)))
SRCS     := $(wildcard $(addsuffix *.c,$(SRC_DIRS))) $(wildcard kernels/cpu/*.c)
OBJS     := $(patsubst %.c,$(BUILD)/obj/%.o,$(SRCS))
LIB      := $(BUILD)/liblattice.a
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))

GPU_TEST_BINS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(wildcard tests/gpu/*.c))

.PHONY: all deps check-deps test test-full demo clean gpu-test peer-check hf-check gpu-build rehearse-gpu fuzz
all: check-deps $(BUILD)/lattice $(TEST_BINS) $(BUILD)/tests/bench_moe $(CUDA_RES)

deps:
	@scripts/setup.sh

# the Debian packages are checked only when the libraries were not found
# (a GPU machine builds from the bundle, without those packages)
check-deps:
ifneq ($(HAVE_PKGS),1)
	@scripts/setup.sh --check
endif

# Objects are rebuilt when the flags change (e.g. CUDA=0 <-> CUDA=1).
FLAGS_STAMP := $(BUILD)/flags.$(shell echo '$(CC) $(CFLAGS) $(NVCC) $(NVCCFLAGS)' | cksum | cut -d' ' -f1)
$(FLAGS_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/flags.*
	@touch $@

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# ptxas's report of every kernel's registers, shared memory, stack and spills
# per architecture (--resource-usage) is kept next to the object as %.res for
# tests/test_resource_usage.sh (budgets: kernels/cuda/budgets.txt); nvcc's
# other messages still reach the terminal.
# attention_mma's PTX is kept too (--keep, in obj/cuda/keep-attention_mma/) for
# tests/test_attention_ptx.sh, which counts its shared-memory loads per MMA.
$(BUILD)/obj/cuda/attention_mma.o: NVKEEP = --keep --keep-dir $(BUILD)/obj/cuda/keep-attention_mma
$(BUILD)/obj/cuda/%.o $(BUILD)/obj/cuda/%.res: kernels/cuda/%.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@) $(if $(NVKEEP),$(BUILD)/obj/cuda/keep-$*)
	$(NVCC) $(NVCCFLAGS) $(NVKEEP) --resource-usage -c $< -o $(BUILD)/obj/cuda/$*.o \
	    2> $(BUILD)/obj/cuda/$*.res.tmp; rc=$$?; \
	  grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' $(BUILD)/obj/cuda/$*.res.tmp >&2; \
	  mv $(BUILD)/obj/cuda/$*.res.tmp $(BUILD)/obj/cuda/$*.res; touch $(BUILD)/obj/cuda/$*.res; \
	  exit $$rc

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
# (gemm.cu), the runtime glue (backend_cuda.cu) and cuDNN's
# attention (attention_cudnn*.cu; the emulated backend resolves to lattice's).
ifeq ($(CUDA),1)
EMU_DIR  := $(BUILD)/emu
EMU_KERNELS := $(filter-out gemm backend_cuda cublas_load attention_cudnn%,$(patsubst kernels/cuda/%.cu,%,$(CUDA_SRCS)))
EMU_OBJS := $(patsubst %,$(EMU_DIR)/%.o,$(EMU_KERNELS)) $(EMU_DIR)/emu_glue.o $(EMU_DIR)/emu_gemm.o
# (include/*.h too: the kernels see backend.h's structs, and a stale object
# built against an older layout crashes the emulation)
EMU_HDRS := $(EMU_DIR)/common.cuh $(EMU_DIR)/attention.cuh $(EMU_DIR)/vec.cuh kernels/cuda/device.cuh \
            kernels/cuda/ops.cuh kernels/cuda/rownorm.cuh $(wildcard include/*.h)
# -w: the rewritten kernels are checked by nvcc -Wall already
EMU_CXXFLAGS := -std=c++20 -O2 -pthread -w -I$(EMU_DIR) -Ikernels/cuda -Iinclude $(CUDA_INC)
EMU_TEST := $(BUILD)/tests/test_cuda_emu
all: $(EMU_TEST)
$(EMU_DIR)/common.cuh: tests/emu/common.cuh
	@mkdir -p $(dir $@)
	cp $< $@
$(EMU_DIR)/attention.cuh: kernels/cuda/attention.cuh
	@mkdir -p $(dir $@)
	cp $< $@
$(EMU_DIR)/vec.cuh: kernels/cuda/vec.cuh tests/emu/transform.py
	@mkdir -p $(dir $@)
	python3 tests/emu/transform.py $< > $@.tmp && mv $@.tmp $@
$(EMU_DIR)/%.cpp: kernels/cuda/%.cu tests/emu/transform.py
	@mkdir -p $(dir $@)
	python3 tests/emu/transform.py $< > $@.tmp && mv $@.tmp $@
$(EMU_DIR)/%.o: $(EMU_DIR)/%.cpp $(EMU_HDRS)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
$(EMU_DIR)/emu_glue.o: tests/emu/emu_glue.cpp $(EMU_HDRS)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@
$(EMU_DIR)/emu_gemm.o: tests/emu/emu_gemm.cpp $(EMU_HDRS)
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
# The training binary on emulated GPUs (train.device=cuda, one emulated device
# per rank) with NCCL's calls carried out over MPI (tests/emu/nccl_mpi.c, in
# place of libnccl): tests/test_nccl_emu.sh runs the multi-rank layouts with
# comm.backend=nccl through lattice's NCCL code on this machine.
EMU_LT := $(BUILD)/tests/emu/lattice
all: $(EMU_LT)
$(EMU_DIR)/emu_glue_cuda.o: tests/emu/emu_glue.cpp $(EMU_HDRS)
	$(CXX) $(EMU_CXXFLAGS) -DEMU_AS_CUDA -c $< -o $@
$(EMU_DIR)/nccl_mpi.o: tests/emu/nccl_mpi.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
-include $(EMU_DIR)/nccl_mpi.d
# what both link: the emulated kernels with the glue as GPUs, the NCCL shim,
# the host code; the libraries without libnccl
EMU_GPU_OBJS := $(filter-out $(EMU_DIR)/emu_glue.o,$(EMU_OBJS)) $(EMU_DIR)/emu_glue_cuda.o \
                $(EMU_DIR)/nccl_mpi.o $(EMU_LIB)
EMU_GPU_LIBS = $(LDFLAGS) $(filter-out $(CUDA_LIB_nccl),$(LDLIBS)) -pthread
# test_comm_mpi.c again, its cases on NCCL groups of emulated GPUs (run by make test)
EMU_NCCL_TEST := $(BUILD)/tests/test_comm_nccl_emu
all: $(EMU_NCCL_TEST)
$(EMU_NCCL_TEST): tests/test_comm_mpi.c tests/test.h $(EMU_GPU_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DLT_NCCL_EMU -Wno-unused-function $< $(EMU_GPU_OBJS) $(EMU_GPU_LIBS) -o $@
$(EMU_LT): $(BUILD)/obj/src/main.o $(EMU_GPU_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $^ $(EMU_GPU_LIBS) -o $@
endif

# GPU checks: need a visible GPU; scripts/gpu_check.sh wraps them with a report.
$(BUILD)/tests/gpu/%: tests/gpu/%.c tests/test.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

gpu-test: check-deps $(GPU_TEST_BINS)
	$(BUILD)/tests/gpu/test_gpu_ops && $(BUILD)/tests/gpu/bench_attention

# scripts/bench_peer.py (plain PyTorch GPT-2, Llama, Mixtral) against lattice: same init, batches
# and per-step losses (tests/gpu/peer_check.sh). Needs a Python with torch, so
# not part of make test: PEER_PYTHON=/path/bin/python PEER_CHECK_DEVICE=cpu|cuda
peer-check: all
	@bash tests/gpu/peer_check.sh $(BUILD)

HF_PYTHON ?= python3
hf-check: all
	@$(HF_PYTHON) scripts/hf_check.py --lattice $(BUILD)/lattice

# what scripts/gpu_check.sh builds on a GPU machine: the binary, the GPU tests
# and the MPI test (no CPU test binaries, no host emulation)
gpu-build: check-deps $(BUILD)/lattice $(GPU_TEST_BINS) $(BUILD)/tests/test_comm_mpi

# the whole GPU flow rehearsed in a Debian chroot whose CUDA comes only from
# pip wheels (scripts/rehearse_gpu.sh: root, network, about 6 GiB of disk)
rehearse-gpu:
	@scripts/rehearse_gpu.sh

# test and demo install packages first, then build in a fresh make (so the
# dependency probe above sees what was just installed).
# ---- fuzz targets (tests/fuzz) ----------------------------------------------
# libFuzzer targets for the readers of untrusted input: token files (lattice,
# llm.c, Megatron .idx/.bin), safetensors, the YAML config. Built with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer (Debian: clang and
# libclang-rt-14-dev, which scripts/setup.sh installs) whenever clang is there;
# make test runs a short pass on the committed corpus (tests/test_fuzz.sh),
# make fuzz runs each target FUZZ_SECONDS (default 300) and keeps what it
# finds in build/fuzz/corpus-TARGET and crashes in build/fuzz/artifacts.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 300
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS    := $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_TARGETS))
# every host source of src/*/ in an archive: each target links only the
# objects its reader needs (the linker takes members by their symbols)
FUZZ_SRCS    := $(wildcard $(addsuffix *.c,$(SRC_DIRS)))
FUZZ_OBJS    := $(patsubst src/%.c,$(BUILD)/fuzz/obj/%.o,$(FUZZ_SRCS))
FUZZ_LIB     := $(BUILD)/fuzz/liblattice_fuzz.a
FUZZ_CFLAGS  := -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=address,undefined \
                -fno-sanitize-recover=undefined -fno-omit-frame-pointer -Iinclude -Isrc $(DEP_CFLAGS) -MMD -MP
HAVE_FUZZ    := $(shell command -v $(FUZZ_CC) >/dev/null 2>&1 && echo 1)
ifeq ($(HAVE_FUZZ),1)
all: $(FUZZ_BINS)
endif
$(BUILD)/fuzz/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_LIB): $(FUZZ_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_LIB) $(DEP_LIBS) -lpthread -lm -o $@
-include $(FUZZ_OBJS:.o=.d)
.SECONDARY: $(FUZZ_OBJS) # kept: make would delete them as intermediates and rebuild them every time

fuzz: check-deps $(FUZZ_BINS)
	@mkdir -p $(BUILD)/fuzz/artifacts
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz/corpus-$$t && cp -n tests/fuzz/corpus/$$t/* $(BUILD)/fuzz/corpus-$$t/; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  $(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 \
	    -artifact_prefix=$(BUILD)/fuzz/artifacts/$$t- -print_final_stats=1 \
	    $(BUILD)/fuzz/corpus-$$t 2>&1 | grep -E '^(#[0-9]+.*DONE|==[0-9]+==ERROR|SUMMARY|stat::number_of_executed_units)' \
	    || true; \
	  [ -z "$$(ls $(BUILD)/fuzz/artifacts/$$t-* 2>/dev/null)" ] || { echo "fuzz_$$t: crash inputs in $(BUILD)/fuzz/artifacts"; exit 1; }; \
	done

NPROC := $(shell nproc 2>/dev/null || echo 2)
test:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@tests/run.sh $(BUILD)

# the suite plus every tp x dp x ZeRO x SP layout and a full pipeline matrix
# (pp x vpp x tp x dp x ZeRO), and the emulated CUDA op tests at the GPU's
# shapes: about 8 more minutes on 2 cores
test-full:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@LT_TEST_FULL=1 tests/run.sh $(BUILD)

# DEMO_CONFIG=configs/llama-demo.yaml trains the Llama block instead
DEMO_CONFIG ?= configs/demo.yaml
# (builds the binary only - no tests, emulation or fuzz targets - with the
# compiler's lines in $(BUILD)/build-demo.log and one summary line)
demo:
	@scripts/setup.sh
	@mkdir -p $(BUILD)
	@echo "lattice: building $(BUILD)/lattice (log: $(BUILD)/build-demo.log)"
	@t0=$$(date +%s); \
	  if $(MAKE) --no-print-directory -j$(NPROC) check-deps $(BUILD)/lattice > $(BUILD)/build-demo.log 2>&1; then \
	    echo "lattice: built $(BUILD)/lattice in $$(( $$(date +%s) - t0 )) s ($$(grep -c -e '^$(CC) ' -e '^$(NVCC) ' $(BUILD)/build-demo.log) files compiled, $$(grep -c 'warning:' $(BUILD)/build-demo.log) warnings)"; \
	  else tail -n 30 $(BUILD)/build-demo.log; echo "lattice: the build failed (whole log: $(BUILD)/build-demo.log)"; exit 1; fi
	@LT_DEMO_CONFIG=$(DEMO_CONFIG) scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)

# make -s print-VAR: a probed value (scripts/gpu_check.sh asks for NVCC_REAL)
print-%:
	@echo '$($*)'

-include $(OBJS:.o=.d) $(CUDA_OBJS:.o=.d) $(BUILD)/obj/src/main.d
