/* Tracker dispatch benchmark: the same tuning job (one 64x64x64 matmul,
 * sketch.random, 96 trials in rounds of 48, every candidate timed for at
 * least 50 ms) on a local ktune-tracker with one worker and 1, then 2, then
 * 3 runners, all as processes of this build tree on 127.0.0.1. Prints the
 * wall time, trials per second and the speed-up over one runner: the
 * tracker splits every round over all free runners, so measurement time
 * should shrink with each runner until compiling (one worker) dominates.
 * Usage: bench_tracker [trials] */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ktune.pb-c.h"
#include "rpc/rpc.h"
#include "util/err.h"
#include "util/util.h"

#define MAX_RUNNERS 3

static char dir[64], bin_dir[1024];

static pid_t spawn(const char *rel, char *const args[], const char *log)
{
    char bin[1200];
    snprintf(bin, sizeof bin, "%s/../%s", bin_dir, rel);
    char *argv[24] = {bin};
    int n = 1;
    for (int i = 0; args[i] && n < 23; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(bin, argv);
        _exit(127);
    }
    close(fd);
    return pid;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* One run with `runners` runners; wall seconds, or a negative value. */
static double run_once(int runners, int trials)
{
    char db[128], addr_file[128], log[160];
    snprintf(db, sizeof db, "%s/r%d.db", dir, runners);
    snprintf(addr_file, sizeof addr_file, "%s/addr%d", dir, runners);
    snprintf(log, sizeof log, "%s/tracker%d.log", dir, runners);
    char *targs[] = {"--listen", "127.0.0.1:0", "--http", "off", "--db", db, "--port-file",
                     addr_file, NULL};
    pid_t pids[2 + MAX_RUNNERS];
    int np = 0;
    pids[np++] = spawn("tracker/ktune-tracker", targs, log);
    char *addr = NULL;
    for (int i = 0; i < 3000 && !(addr = kt_file_read(addr_file, NULL)); i++)
        sleep_ms(10);
    if (!addr) {
        fprintf(stderr, "bench_tracker: the tracker did not start (%s)\n", log);
        return -1;
    }
    addr[strcspn(addr, "\n")] = '\0';
    char *wargs[] = {"--tracker", addr, NULL};
    snprintf(log, sizeof log, "%s/worker%d.log", dir, runners);
    pids[np++] = spawn("worker/ktune-worker", wargs, log);
    for (int r = 0; r < runners; r++) {
        char *rargs[] = {"--tracker", addr, "--key", "bench", NULL};
        snprintf(log, sizeof log, "%s/runner%d-%d.log", dir, runners, r);
        pids[np++] = spawn("server/ktune-runner", rargs, log);
    }
    kt_rpc_client_t *c = kt_rpc_client_new(addr, NULL);
    /* Wait for the peers, then submit and poll. */
    for (int i = 0; i < 600; i++) {
        Ktune__V1__QueueStatusRequest q = KTUNE__V1__QUEUE_STATUS_REQUEST__INIT;
        ProtobufCMessage *out = NULL;
        if (kt_rpc_call_unary(c, "/ktune.v1.Tracker/QueueStatus", &q.base,
                              &ktune__v1__queue_status_response__descriptor, 5000, &out,
                              NULL) == 0) {
            int n = (int)((Ktune__V1__QueueStatusResponse *)out)->n_peers;
            protobuf_c_message_free_unpacked(out, NULL);
            if (n == runners + 1)
                break;
        }
        sleep_ms(100);
    }
    Ktune__V1__Workload wl = KTUNE__V1__WORKLOAD__INIT;
    wl.json = "{\"op\":\"matmul\",\"M\":64,\"N\":64,\"K\":64}";
    Ktune__V1__Task task = KTUNE__V1__TASK__INIT, *tp = &task;
    task.workload = &wl;
    task.weight = 1;
    Ktune__V1__MeasureOptions mo = KTUNE__V1__MEASURE_OPTIONS__INIT;
    mo.min_repeat_ms = 50;
    mo.check_correctness = 1;
    Ktune__V1__TuningOptions to = KTUNE__V1__TUNING_OPTIONS__INIT;
    to.num_measure_trials = trials;
    to.num_measures_per_round = trials / 2;
    to.measure = &mo;
    Ktune__V1__Job job = KTUNE__V1__JOB__INIT;
    job.tasks = &tp;
    job.n_tasks = 1;
    job.runner_key = "bench";
    job.policy = "sketch.random";
    job.options = &to;
    Ktune__V1__SubmitJobRequest req = KTUNE__V1__SUBMIT_JOB_REQUEST__INIT;
    req.job = &job;
    ProtobufCMessage *out = NULL;
    double t0 = kt_time_mono(), wall = -1;
    if (kt_rpc_call_unary(c, "/ktune.v1.Tracker/SubmitJob", &req.base,
                          &ktune__v1__submit_job_response__descriptor, 30000, &out, NULL) != 0) {
        fprintf(stderr, "bench_tracker: SubmitJob: %s\n", kt_err_msg());
    } else {
        Ktune__V1__JobRef ref = KTUNE__V1__JOB_REF__INIT;
        ref.job_id = ((Ktune__V1__SubmitJobResponse *)out)->job_id;
        protobuf_c_message_free_unpacked(out, NULL);
        for (;;) {
            ProtobufCMessage *p = NULL;
            if (kt_rpc_call_unary(c, "/ktune.v1.Tracker/JobStatus", &ref.base,
                                  &ktune__v1__job_progress__descriptor, 5000, &p, NULL) == 0) {
                const char *state = ((Ktune__V1__JobProgress *)p)->state;
                int end = strcmp(state, "running") != 0 && strcmp(state, "queued") != 0;
                if (end && strcmp(state, "done") == 0)
                    wall = kt_time_mono() - t0;
                else if (end)
                    fprintf(stderr, "bench_tracker: job %s\n", state);
                protobuf_c_message_free_unpacked(p, NULL);
                if (end)
                    break;
            }
            sleep_ms(100);
        }
    }
    kt_rpc_client_free(c);
    free(addr);
    for (int i = 0; i < np; i++)
        kill(pids[i], SIGTERM);
    for (int i = 0; i < np; i++)
        waitpid(pids[i], NULL, 0);
    return wall;
}

int main(int argc, char **argv)
{
    int trials = argc > 1 ? atoi(argv[1]) : 96;
    if (trials < 2) {
        fprintf(stderr, "usage: bench_tracker [trials >= 2]\n");
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", bin_dir, sizeof bin_dir - 1);
    if (n <= 0)
        return 1;
    bin_dir[n] = '\0';
    *strrchr(bin_dir, '/') = '\0';
    snprintf(dir, sizeof dir, "/tmp/kt_bench_tracker_XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    printf("tracker dispatch: %d trials of a 64x64x64 matmul, 1 worker, N runners\n", trials);
    printf("%8s  %10s  %10s  %8s\n", "runners", "wall (s)", "trials/s", "speed-up");
    double base = 0;
    int rc = 0;
    for (int r = 1; r <= MAX_RUNNERS; r++) {
        double w = run_once(r, trials);
        if (w <= 0) {
            rc = 1;
            break;
        }
        if (r == 1)
            base = w;
        printf("%8d  %10.2f  %10.2f  %7.2fx\n", r, w, trials / w, base / w);
        fflush(stdout);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
