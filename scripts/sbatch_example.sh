#!/usr/bin/env bash
# sbatch_example.sh - a Slurm batch script for a multi-node lattice run.
# Submit with: sbatch scripts/sbatch_example.sh configs/your.yaml [key=value ...]
# One task per GPU; lattice reads its rank, the world size and its local rank
# (for the GPU it uses) from the launcher, so srun and mpirun both work.
#SBATCH --job-name=lattice
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=24:00:00
#SBATCH --output=lattice-%j.out
# SIGUSR1 to every task 180 s before the time limit: lattice stops after the
# current step and saves a checkpoint (exit 138). Without it Slurm sends SIGTERM
# at the limit and SIGKILL KillWait (30 s by default) later, which the last
# step and the save must then fit in. Raise 180 when a step plus a save take
# longer. To stop the job early: scancel --signal=TERM JOBID (a signal to srun
# itself makes Slurm SIGKILL the tasks, without a save).
#SBATCH --signal=USR1@180
set -euo pipefail
CONFIG=${1:?usage: sbatch scripts/sbatch_example.sh CONFIG.yaml [key=value ...]}
shift
# world = nodes x tasks per node must equal tp x pp x dp of the config.
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
# NCCL: NVLink/NVSwitch inside a node is used automatically; across nodes use the
# InfiniBand/RoCE HCAs with GPUDirect RDMA (set the interface names of your site).
export NCCL_IB_HCA=${NCCL_IB_HCA:-mlx5}
export NCCL_NET_GDR_LEVEL=${NCCL_NET_GDR_LEVEL:-PHB}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker}
srun --mpi=pmix --kill-on-bad-exit=1 build/lattice train "$CONFIG" "$@"
