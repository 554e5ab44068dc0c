/* dist.c - see dist.h. */
#include "dist.h"

#include <mpi.h>
#include <stdlib.h>

#include "common.h"

#define MPI_CHECK(call)                                                                 \
    do {                                                                                \
        int rc_ = (call);                                                               \
        if (rc_ != MPI_SUCCESS) {                                                       \
            char msg_[MPI_MAX_ERROR_STRING];                                            \
            int len_ = 0;                                                               \
            MPI_Error_string(rc_, msg_, &len_);                                         \
            lt_fatal("MPI call failed: %s: %s", #call, msg_);                           \
        }                                                                               \
    } while (0)

int lt_world_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                 "SLURM_STEP_NUM_TASKS", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

void lt_world_init(LtWorld *w, int *argc, char ***argv) {
    w->rank = 0;
    w->world = 1;
    w->local_rank = 0;
    w->local_size = 1;
    w->mpi = 0;
    if (!lt_world_launched()) return;
    /* the overlap switches (parallel.overlap_*) run collectives on a worker
     * thread beside the training thread's own MPI calls; comm_async.c checks
     * what was provided when it starts one */
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    w->mpi = 1;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &w->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w->world));
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL,
                                  &local));
    MPI_CHECK(MPI_Comm_rank(local, &w->local_rank));
    MPI_CHECK(MPI_Comm_size(local, &w->local_size));
    MPI_CHECK(MPI_Comm_free(&local));
    lt_set_log_rank(w->rank);
}

static void world_barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }

void lt_world_collective_errors(const LtWorld *w, int on) {
    lt_set_error_barrier(on && w->mpi && w->world > 1 ? world_barrier : NULL);
}

void lt_world_finalize(LtWorld *w) {
    if (w->mpi) MPI_Finalize();
    w->mpi = 0;
}
