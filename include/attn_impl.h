/* attn_impl.h - the value of model.attention: which implementation the CUDA
 * backend's causal attention may use (attn_select.h decides). Alone so that
 * the config takes it without the backend's headers. */
#ifndef LT_ATTN_IMPL_H
#define LT_ATTN_IMPL_H

/* model.attention; the values are the config enum's (auto, cudnn, lattice). */
typedef enum { LT_ATTN_AUTO = 0, LT_ATTN_CUDNN = 1, LT_ATTN_LATTICE = 2 } LtAttnImpl;

#endif
