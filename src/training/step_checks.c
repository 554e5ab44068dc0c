/* step_checks.c - a step's checks before its update (see step_checks.h). */
#include "step_checks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

LtInject lt_inject_parse(int rank) {
    LtInject in = {{0}, {0}};
    const char *e = getenv("LT_INJECT_NONFINITE"), *all = e;
    static const char *const kinds[] = {"", "loss", "grad", "spike"};
    for (int i = 0; e && *e; i++) {
        if (i == LT_INJECT_MAX) /* counted over all ranks' entries, so every rank refuses alike */
            lt_input_error("LT_INJECT_NONFINITE='%s': more than %d entries; it holds at most %d",
                           all, LT_INJECT_MAX, LT_INJECT_MAX);
        char kind[8];
        long step = 0;
        int r = 0, n = sscanf(e, "%7[a-z]:%ld:%d", kind, &step, &r), k = 1;
        while (k < 4 && strcmp(kind, kinds[k])) k++;
        if (n < 2 || step < 1 || k == 4)
            lt_input_error("LT_INJECT_NONFINITE='%s': expected loss|grad|spike:STEP[:RANK][,...]", all);
        if (r == rank) {
            in.kind[i] = k;
            in.step[i] = step;
        }
        e = strchr(e, ',');
        if (e) e++;
    }
    return in;
}

void lt_inject_nonfinite(LtRun *r, const LtInject *in, long step, double *loss_dev) {
    LtBackend *be = r->be;
    for (int i = 0; i < LT_INJECT_MAX; i++) {
        if (!in->kind[i] || step + 1 != in->step[i]) continue;
        if (in->kind[i] == 1) {
            const double nan = NAN;
            be->ops->upload(be, loss_dev, &nan, sizeof nan);
        } else if (in->kind[i] == 3) { /* a finite but outlying loss (the gradients stay) */
            double x;
            be->ops->download(be, &x, loss_dev, sizeof x);
            x *= 100.0;
            be->ops->upload(be, loss_dev, &x, sizeof x);
        } else {
            const float inf = INFINITY;
            be->ops->upload(be, lt_optim_grad_base(r->opt, r->model->grads), &inf, sizeof inf);
        }
    }
}

int lt_loss_spike(LtRun *r, const LtSpikeWindow *sw, double *loss_dev, double tokens,
                  double *loss, double *z) {
    double sum;
    r->be->ops->download(r->be, &sum, loss_dev, sizeof sum);
    lt_comm_all_reduce(lt_comm_host(r->dp), &sum, 1, LT_COMM_F64, LT_COMM_SUM);
    lt_comm_all_reduce(lt_comm_host(r->pp), &sum, 1, LT_COMM_F64, LT_COMM_SUM);
    *loss = sum / tokens;
    *z = 0.0;
    if (sw->n < sw->cap || !isfinite(*loss)) return 0; /* (non-finite: skipped anyway) */
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < sw->n; i++) mean += sw->x[i];
    mean /= sw->n;
    for (int i = 0; i < sw->n; i++) var += (sw->x[i] - mean) * (sw->x[i] - mean);
    const double sd = sqrt(var / (sw->n - 1));
    *z = sd > 0.0 ? (*loss - mean) / sd : 0.0;
    if (*z <= r->cfg->train.loss_spike_zscore) return 0;
    const double nan = NAN;
    r->be->ops->upload(r->be, loss_dev, &nan, sizeof nan);
    return 1;
}

void lt_spike_window_push(LtSpikeWindow *sw, double loss) {
    sw->x[sw->next] = loss;
    sw->next = (sw->next + 1) % sw->cap;
    if (sw->n < sw->cap) sw->n++;
}
