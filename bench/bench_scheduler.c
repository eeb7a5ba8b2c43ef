/* Task scheduler benchmark on an analytic network: 24 tasks whose best cost
 * after r rounds follows base * (1 + amp * exp(-r / tau)), with weights and
 * similarity groups like a CNN's. Prints, for the same budget, the estimated
 * total latency reached by each strategy (ratio against round-robin), the
 * trials each needs to come within 5% of the gradient strategy's final
 * latency, and the scheduler's own cost per decision. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "scheduler/scheduler.h"
#include "util/util.h"

#define NT 24
#define PER_ROUND 64
#define BUDGET (NT * PER_ROUND * 12)

typedef struct {
    double base[NT], amp[NT], tau[NT];
    int rounds[NT];
    double target;       /* latency to reach; 0 = none */
    int64_t trials;
    int64_t reached_at;  /* trials when target was first met; -1 never */
    const kt_scheduler_t *s;
} net_t;

static void net_init(net_t *n, kt_scheduler_task_t *tasks)
{
    static const char *tags[4] = {"conv2d_bias_relu", "conv2d_bias_add_relu", "dense", NULL};
    unsigned x = 12345;
    for (int t = 0; t < NT; t++) {
        x = x * 1103515245u + 12345u;
        double u = (double)(x >> 8) / (1u << 24);
        n->base[t] = 2e-5 * (1 + 9 * u);
        n->amp[t] = 2 + 30 * u * u;
        n->tau[t] = 1 + 8 * (1 - u);
        n->rounds[t] = 0;
        tasks[t].weight = 1 + (t % 5 == 0 ? 5 : t % 3);
        tasks[t].flops = n->base[t] * 2e12;   /* every task peaks near 2 TFLOPS */
        tasks[t].similarity_tag = tags[t % 4];
        tasks[t].workload_key = "bench";
    }
    n->trials = 0;
    n->reached_at = -1;
}

static int net_round(void *user, int task, int k, double *costs)
{
    net_t *n = user;
    int r = n->rounds[task]++;
    double best = n->base[task] * (1 + n->amp[task] * exp(-r / n->tau[task]));
    for (int i = 0; i < k; i++)
        costs[i] = best * (1 + 0.01 * i);
    n->trials += k;
    return k;
}

static void on_latency(void *user, int64_t trials, double elapsed, double est)
{
    (void)elapsed;
    net_t *n = user;
    if (n->reached_at < 0 && n->target > 0 && est <= n->target * 1.05)
        n->reached_at = trials;
}

static double run(kt_scheduler_strategy_t st, net_t *n, double target, double *secs,
                  int64_t *reached)
{
    kt_scheduler_task_t tasks[NT];
    net_init(n, tasks);
    n->target = target;
    kt_scheduler_config_t c;
    kt_scheduler_config_default(&c);
    c.strategy = st;
    c.num_measure_trials = BUDGET;
    c.num_measures_per_round = PER_ROUND;
    c.table_out = NULL;
    c.seed = 7;
    c.latency_log = on_latency;
    c.latency_user = n;
    kt_scheduler_t *s = kt_scheduler_new(tasks, NT, &c);
    if (!s)
        return NAN;
    kt_scheduler_tuner_t tu = {.search_round = net_round, .user = n};
    double t0 = kt_time_mono();
    kt_scheduler_run(s, &tu);
    *secs = kt_time_mono() - t0;
    *reached = n->reached_at;
    double est = kt_scheduler_estimated_latency(s);
    kt_scheduler_free(s);
    return est;
}

int main(void)
{
    net_t n;
    double secs[3];
    int64_t reached[3];
    const kt_scheduler_strategy_t st[3] = {KT_SCHEDULER_ROUND_ROBIN, KT_SCHEDULER_SEQUENTIAL,
                                           KT_SCHEDULER_GRADIENT};
    double lat[3];
    /* First pass: the gradient's final latency is the target for all. */
    lat[2] = run(KT_SCHEDULER_GRADIENT, &n, 0, &secs[2], &reached[2]);
    for (int i = 0; i < 3; i++)
        lat[i] = run(st[i], &n, lat[2], &secs[i], &reached[i]);
    int rounds = BUDGET / PER_ROUND;
    printf("analytic network: %d tasks, budget %d trials (%d rounds of %d)\n", NT, BUDGET, rounds,
           PER_ROUND);
    for (int i = 0; i < 3; i++) {
        char when[32] = "never";
        if (reached[i] >= 0)
            snprintf(when, sizeof when, "%lld trials", (long long)reached[i]);
        printf("%-12s est. latency %.4f ms  (x%.3f of round-robin)  within 5%% of gradient: %s  "
               "%.2f us/decision\n",
               kt_scheduler_strategy_name(st[i]), lat[i] * 1e3, lat[i] / lat[0], when,
               secs[i] / rounds * 1e6);
    }
    return 0;
}
