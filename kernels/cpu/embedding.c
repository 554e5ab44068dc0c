/* embedding.c - token + position embedding, forward and backward.
 * Token ids >= 0 are trusted to be in [0, rows of wte) (the data loader validates
 * them, the model maps them to local rows); a negative id is a row another
 * tensor-parallel rank owns: no wte term forward, no wte gradient backward. */
#include <omp.h>

#include "cpu_ops.h"

void cpu_embedding_fwd(LtBackend *be, void *out_, const int32_t *tokens, const void *wte_,
                       const void *wpe_, const int32_t *pos, int B, int T, int C) {
    float *out = out_;
    const float *wte = wte_, *wpe = wpe_;
    const int bf16 = cpu_is_bf16(be);
    const int N = B * T;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const int32_t tok = tokens[i];
        const float *te = tok >= 0 ? wte + (size_t)tok * C : NULL;
        const float *pe = wpe ? wpe + (size_t)(pos ? pos[i] : i % T) * C : NULL;
        float *o = out + (size_t)i * C;
        if (te && pe)
            for (int c = 0; c < C; c++) o[c] = cpu_store(bf16, te[c] + pe[c]);
        else if (te)
            for (int c = 0; c < C; c++) o[c] = cpu_store(bf16, te[c]);
        else if (pe)
            for (int c = 0; c < C; c++) o[c] = cpu_store(bf16, pe[c]);
        else
            for (int c = 0; c < C; c++) o[c] = 0.0f;
    }
}

/* Deterministic without atomics: dwpe is parallel over positions (each row
 * summed over the batch in order by one thread); dwte is parallel over channel
 * ranges, each thread visiting all tokens in order and updating only its own
 * channels. Every element is therefore summed in token order, whatever the
 * thread count, and repeated tokens never race. NULL dwte / dwpe skip that part;
 * negative ids are skipped. With per-token positions (pos) dwpe is summed like
 * dwte: its rows are then indexed by pos as dwte's by token. */
void cpu_embedding_bwd(LtBackend *be, float *dwte, float *dwpe, const void *dout_,
                       const int32_t *tokens, const int32_t *pos, int B, int T, int C) {
    const float *dout = dout_;
    const int N = B * T;
    const int nt = cpu_nthreads(be);
#pragma omp parallel num_threads(nt)
    {
        if (dwpe && !pos) {
#pragma omp for schedule(static) nowait
            for (int t = 0; t < T; t++) {
                float *dp = dwpe + (size_t)t * C;
                for (int b = 0; b < B; b++) {
                    const float *d = dout + ((size_t)b * T + t) * C;
                    for (int c = 0; c < C; c++) dp[c] += d[c];
                }
            }
        }
        /* Channel ranges in multiples of 16 floats (one cache line) so
         * threads do not share cache lines of dwte rows. */
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        int nchunks = (C + 15) / 16;
        int c0 = (int)((long long)nchunks * tid / nth) * 16;
        int c1 = (int)((long long)nchunks * (tid + 1) / nth) * 16;
        if (c1 > C) c1 = C;
        for (int i = 0; i < N && c0 < c1; i++) {
            const float *d = dout + (size_t)i * C;
            if (dwte && tokens[i] >= 0) { /* negative: a row owned by another rank */
                float *dw = dwte + (size_t)tokens[i] * C;
                for (int c = c0; c < c1; c++) dw[c] += d[c];
            }
            if (dwpe && pos) {
                float *dp = dwpe + (size_t)pos[i] * C;
                for (int c = c0; c < c1; c++) dp[c] += d[c];
            }
        }
    }
}
