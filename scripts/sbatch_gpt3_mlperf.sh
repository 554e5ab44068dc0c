#!/usr/bin/env bash
# sbatch_gpt3_mlperf.sh - MLPerf Training GPT-3 175B with configs/gpt3-175b-mlperf.yaml
# on 96 node(s) of 8 H100 (docs/mlperf.md). From the repository root:
#   MLPERF_TRAIN=... MLPERF_VALID=... MLPERF_START=ckpt/gpt3-start MLPERF_ORG=... MLPERF_PLATFORM=... \
#     sbatch scripts/sbatch_gpt3_mlperf.sh [key=value ...]
# (scripts/mlperf_run.sh lists the variables). The world size, nodes x 8,
# must equal the config's tp x pp x dp.
#SBATCH --job-name=mlperf-gpt3
#SBATCH --nodes=96
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=12:00:00
#SBATCH --output=mlperf-gpt3-%j.out
#SBATCH --exclusive
set -euo pipefail
exec scripts/mlperf_run.sh configs/gpt3-175b-mlperf.yaml "$@"
