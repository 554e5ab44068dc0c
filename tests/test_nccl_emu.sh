#!/usr/bin/env bash
# test_nccl_emu.sh BUILD_DIR - the multi-rank layouts through lattice's NCCL
# code on this machine: tests/gpu/parallel_gpu.sh with PARALLEL_GPU_EMU=1
# (BUILD_DIR/tests/emu/lattice: the CUDA backend's host emulation as one GPU
# per rank, NCCL's calls carried out over MPI by tests/emu/nccl_mpi.c). Each
# layout with comm.backend=nccl - DP with ZeRO 0/1/2, TP with SP, PP and
# interleaved PP, EP over DP and over TP + SP, 4-rank combinations, the
# overlap switches, fp32 and bf16 - must match one process on the emulated
# backend; NCCL on a shared (emulated) GPU must be refused. Built only where
# the CUDA toolkit is (as test_cuda_emu).
BUILD=${1:-build}
if [ ! -x "$BUILD/tests/emu/lattice" ]; then
  echo "SKIP test_nccl_emu: $BUILD/tests/emu/lattice not built (no CUDA toolkit)"
  exit 0
fi
exec env PARALLEL_GPU_EMU=1 bash "$(dirname "$0")/gpu/parallel_gpu.sh" "$BUILD"
