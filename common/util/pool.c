/* The loop thread pool; see pool.h. */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "err.h"

/* One kt_pool_for call: lives on its caller's stack until done == n. */
typedef struct loop {
    struct loop *next;          /* in the pool's list while items are unclaimed */
    kt_pool_fn fn;
    void *ctx;
    int n, next_item, done;     /* under the pool's mutex */
} loop_t;

struct kt_pool {
    pthread_mutex_t mu;
    pthread_cond_t work;        /* a loop was added, or stopping */
    pthread_cond_t finished;    /* some loop's last item returned */
    loop_t *head, *tail;        /* loops with unclaimed items, oldest first */
    int stopping;
    int threads;                /* width: pool threads + the caller */
    int started;                /* pool threads running */
    pthread_t *th;
};

/* Claim the next item of l (mutex held); unlinks l once all are claimed. */
static int claim(kt_pool_t *p, loop_t *l)
{
    int i = l->next_item++;
    if (l->next_item == l->n) {
        loop_t **pp = &p->head, *prev = NULL;
        while (*pp != l) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        *pp = l->next;
        if (p->tail == l)
            p->tail = prev;
        l->next = NULL;
    }
    return i;
}

/* Run item i of l and count it (mutex held on entry and on return). */
static void run_item(kt_pool_t *p, loop_t *l, int i)
{
    pthread_mutex_unlock(&p->mu);
    l->fn(l->ctx, i);
    pthread_mutex_lock(&p->mu);
    if (++l->done == l->n)
        pthread_cond_broadcast(&p->finished);
}

static void *worker(void *arg)
{
    kt_pool_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stopping)
            pthread_cond_wait(&p->work, &p->mu);
        if (!p->head)
            break;   /* stopping and nothing left */
        loop_t *l = p->head;
        run_item(p, l, claim(p, l));
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

kt_pool_t *kt_pool_new(int threads)
{
    if (threads < 1 || threads > KT_POOL_MAX_THREADS) {
        kt_err_set(KT_EINVAL, "thread pool: %d threads (want 1..%d)", threads,
                   KT_POOL_MAX_THREADS);
        return NULL;
    }
    kt_pool_t *p = calloc(1, sizeof *p);
    if (!p || (threads > 1 && !(p->th = calloc((size_t)threads - 1, sizeof *p->th)))) {
        free(p);
        kt_err_set(KT_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->finished, NULL);
    p->threads = threads;
    for (int i = 0; i < threads - 1; i++) {
        if (pthread_create(&p->th[i], NULL, worker, p) != 0) {
            kt_pool_free(p);
            kt_err_set(KT_EIO, "thread pool: cannot start thread %d of %d", i + 1, threads - 1);
            return NULL;
        }
        p->started++;
    }
    return p;
}

void kt_pool_free(kt_pool_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->finished);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p);
}

int kt_pool_threads(const kt_pool_t *p)
{
    return p ? p->threads : 1;
}

void kt_pool_for(kt_pool_t *p, int n, kt_pool_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (!p || p->threads == 1 || n == 1) {
        for (int i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    loop_t l = {.fn = fn, .ctx = ctx, .n = n};
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->next = &l;
    else
        p->head = &l;
    p->tail = &l;
    pthread_cond_broadcast(&p->work);
    /* The caller works on its own loop, never on another's: its items are
     * what it waits for, and it must not be held up by a longer loop. */
    while (l.next_item < l.n)
        run_item(p, &l, claim(p, &l));
    while (l.done < l.n)
        pthread_cond_wait(&p->finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int kt_pool_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > KT_POOL_MAX_THREADS ? KT_POOL_MAX_THREADS : (int)n;
}
