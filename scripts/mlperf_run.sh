#!/usr/bin/env bash
# mlperf_run.sh CONFIG [key=value ...] - one MLPerf Training run of lattice
# inside a Slurm allocation, called by scripts/sbatch_{gpt3,llama31_8b,
# llama31_405b,gpt_oss_20b}_mlperf.sh (run from the repository root). Reads:
#   MLPERF_TRAIN, MLPERF_VALID  the preprocessed C4 training and validation
#                               data (Megatron .bin/.idx prefix, docs/data.md;
#                               training also as a blend "W PREFIX ...", the
#                               GPT-OSS reference's "10 PREFIX")
#   MLPERF_START                the imported start checkpoint (GPT-3, 405B;
#                               the 8B and GPT-OSS 20B start from random
#                               weights and refuse one)
#   MLPERF_ORG, MLPERF_PLATFORM submission_org and submission_platform
#   MLPERF_LOG                  the MLLOG file (default /tmp/mlperf_<job id>.log,
#                               outside the source tree, on rank 0's node)
#   LATTICE                     the binary (default build/lattice)
#   MLPERF_DROP_CACHES=1        drop the page cache on every node first (needs
#                               root there; lattice logs cache_clear true and
#                               leaves the dropping to the submitter)
set -euo pipefail
CONFIG=${1:?usage: mlperf_run.sh CONFIG [key=value ...]}
shift
: "${MLPERF_TRAIN:?set MLPERF_TRAIN to the preprocessed C4 training data}"
: "${MLPERF_VALID:?set MLPERF_VALID to the preprocessed C4 validation data}"
: "${MLPERF_ORG:?set MLPERF_ORG (submission_org)}"
: "${MLPERF_PLATFORM:?set MLPERF_PLATFORM (submission_platform)}"
LOG=${MLPERF_LOG:-/tmp/mlperf_${SLURM_JOB_ID:-local}.log}
ARGS=(data.train_path="$MLPERF_TRAIN" data.valid_path="$MLPERF_VALID"
      logging.mllog="$LOG" logging.mllog_org="$MLPERF_ORG" logging.mllog_platform="$MLPERF_PLATFORM")
if [ -n "${MLPERF_START:-}" ]; then
  if grep -Eq '^  mllog_benchmark: (llama31_8b|gpt_oss_20b)' "$CONFIG"; then
    echo "mlperf_run.sh: $CONFIG trains from random weights (init_checkpoint_step 0); unset MLPERF_START" >&2
    exit 2
  fi
  ARGS+=(checkpoint.load="$MLPERF_START")
fi
if [ "${MLPERF_DROP_CACHES:-0}" = 1 ]; then
  srun --ntasks-per-node=1 bash -c 'sync && echo 3 > /proc/sys/vm/drop_caches'
fi
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-8}
# NCCL across nodes: the InfiniBand/RoCE HCAs with GPUDirect RDMA (set your
# site's interface names)
export NCCL_IB_HCA=${NCCL_IB_HCA:-mlx5}
export NCCL_NET_GDR_LEVEL=${NCCL_NET_GDR_LEVEL:-PHB}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker}
srun --mpi=pmix --kill-on-bad-exit=1 "${LATTICE:-build/lattice}" train "$CONFIG" "${ARGS[@]}" "$@"
echo "MLPerf log: $LOG (check it: scripts/mlperf_check.sh $LOG)"
