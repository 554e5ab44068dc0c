#!/usr/bin/env bash
# sbatch_llama31_405b_mlperf.sh - MLPerf Training Llama 3.1 405B with configs/llama3.1-405b-mlperf.yaml
# on 72 node(s) of 8 H100 (docs/mlperf.md). From the repository root:
#   MLPERF_TRAIN=... MLPERF_VALID=... MLPERF_START=ckpt/llama31-405b-start MLPERF_ORG=... MLPERF_PLATFORM=... \
#     sbatch scripts/sbatch_llama31_405b_mlperf.sh [key=value ...]
# (scripts/mlperf_run.sh lists the variables). The world size, nodes x 8,
# must equal the config's tp x pp x dp.
#SBATCH --job-name=mlperf-llama31-405b
#SBATCH --nodes=72
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=24:00:00
#SBATCH --output=mlperf-llama31-405b-%j.out
#SBATCH --exclusive
set -euo pipefail
exec scripts/mlperf_run.sh configs/llama3.1-405b-mlperf.yaml "$@"
