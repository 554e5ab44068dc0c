#!/usr/bin/env bash
# sbatch_gpt_oss_20b_mlperf.sh - MLPerf Training GPT-OSS 20B with configs/gpt-oss-20b-mlperf.yaml
# on 1 node of 8 H100 (docs/mlperf.md). From the repository root:
#   MLPERF_TRAIN=... MLPERF_VALID=... MLPERF_ORG=... MLPERF_PLATFORM=... \
#     sbatch scripts/sbatch_gpt_oss_20b_mlperf.sh [key=value ...]
# (scripts/mlperf_run.sh lists the variables; MLPERF_TRAIN may be the
# reference's one-file blend, "10 /data/c4-train.en_6_text_document"). From
# random weights: no MLPERF_START. The global batch of MLCommons' second
# reference convergence point:
#   sbatch scripts/sbatch_gpt_oss_20b_mlperf.sh train.global_batch_size=32 \
#     optimizer.lr=8.0e-4 optimizer.min_lr=8.0e-5
# The world size, 8, must equal the config's tp x pp x dp.
#SBATCH --job-name=mlperf-gpt-oss-20b
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=24:00:00
#SBATCH --output=mlperf-gpt-oss-20b-%j.out
#SBATCH --exclusive
set -euo pipefail
exec scripts/mlperf_run.sh configs/gpt-oss-20b-mlperf.yaml "$@"
