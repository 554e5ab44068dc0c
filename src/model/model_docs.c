/* model_docs.c - packed documents (data.reset_position_ids,
 * data.reset_attention_mask) and sliding windows: each token's position and
 * first visible key from the batch's end-of-document tokens
 * (lt_doc_layout), the documents' per-slot device arrays (the windows' are
 * made with the model, model.c), and the upload of a slot's arrays before a
 * chunk's forward. kstart_of (model_internal.h) picks a layer's array. */
#include "model.h"

#include <stddef.h>

#include "common.h"
#include "model/model_internal.h"

void lt_doc_layout(const int32_t *tokens, int B, int T, int32_t eod, int32_t *pos,
                   int32_t *kstart) {
    for (int b = 0; b < B; b++) {
        const int32_t *tk = tokens + (size_t)b * T;
        int start = 0;
        for (int t = 0; t < T; t++) {
            if (t > 0 && eod >= 0 && tk[t - 1] == eod) start = t;
            if (pos) pos[(size_t)b * T + t] = t - start;
            if (kstart) kstart[(size_t)b * T + t] = start;
        }
    }
}

void lt_model_set_documents(LtModel *m, int32_t eod, int reset_pos, int reset_attn) {
    const size_t N = (size_t)m->B * m->T;
    m->in->doc_eod = eod;
    if (!reset_pos && !reset_attn) return;
    if (!m->in->host_pos) m->in->host_pos = lt_malloc(N * sizeof(int32_t));
    if (!m->in->host_ks) m->in->host_ks = lt_malloc(N * sizeof(int32_t));
    for (int s = 0; s < m->nslots; s++) {
        LtActSlot *sl = &m->slot[s];
        if (reset_pos) sl->pos = m->be->ops->alloc(m->be, N * sizeof(int32_t));
        if (reset_attn) sl->kstart = m->be->ops->alloc(m->be, N * sizeof(int32_t));
        m->mem.activations += (size_t)(!!reset_pos + !!reset_attn) * N * sizeof(int32_t);
    }
}

/* Slot sl's document arrays from the host tokens of B sequences (uploaded;
 * the staging is pageable, so reusable once the upload returns; declared to
 * the backend with their documents, backend.h attention_documents), and make
 * them the running ones. */
void lt_mdl_documents_upload(LtModel *m, LtActSlot *sl, const int32_t *tokens, int B) {
    const int N = B * m->T;
    if (sl->pos || sl->kstart) {
        lt_doc_layout(tokens, B, m->T, m->in->doc_eod, m->in->host_pos, m->in->host_ks);
        if (sl->pos)
            m->be->ops->upload_async(m->be, sl->pos, m->in->host_pos, (size_t)N * sizeof(int32_t));
        if (sl->kstart)
            m->be->ops->upload_async(m->be, sl->kstart, m->in->host_ks,
                                     (size_t)N * sizeof(int32_t));
    }
    if (sl->kwin) { /* the window's first key, within the document when they reset */
        for (int i = 0; i < N; i++) {
            const int from = i % m->T - m->d.window, doc = sl->kstart ? m->in->host_ks[i] : 0;
            m->in->host_kw[i] = from > doc ? from : doc;
        }
        m->be->ops->upload_async(m->be, sl->kwin, m->in->host_kw, (size_t)N * sizeof(int32_t));
    }
    if (sl->kstart && m->be->ops->attention_documents) { /* both arrays hold documents */
        m->be->ops->attention_documents(m->be, sl->kstart, m->in->host_ks, -1, B, m->T);
        if (sl->kwin)
            m->be->ops->attention_documents(m->be, sl->kwin, m->in->host_ks, m->d.window, B,
                                            m->T);
    }
    m->in->pos = sl->pos;
    m->in->kstart = sl->kstart;
    m->in->kwin = sl->kwin;
}
