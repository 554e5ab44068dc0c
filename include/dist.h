/* dist.h - process world: MPI when launched by mpirun/srun, a plain single
 * process otherwise (the binary never needs a launcher for world size 1). */
#ifndef LT_DIST_H
#define LT_DIST_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int rank, world, local_rank, local_size;
    int mpi; /* 1 when MPI was initialized */
} LtWorld;

/* Initialize from the launcher's environment; sets the log rank. */
void lt_world_init(LtWorld *w, int *argc, char ***argv);
void lt_world_finalize(LtWorld *w);
/* on != 0: input errors are collective (every rank hits the same one: config
 * and layout checks); rank 0 reports, all ranks leave together. */
void lt_world_collective_errors(const LtWorld *w, int on);
/* 1 when a launcher (mpirun, srun) started this process. */
int lt_world_launched(void);

#ifdef __cplusplus
}
#endif

#endif
