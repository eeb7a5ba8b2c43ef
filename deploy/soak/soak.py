#!/usr/bin/env python3
"""The chaos soak's orchestrator (deploy/soak.sh runs it inside namespace
ktsoak-cl once the namespaces, certificates and the store's tmpfs exist).

It starts the daemons (tracker in ktsoak-tr; a worker and two runners in each
of ktsoak-h1 and ktsoak-h2), then for MINUTES runs at once:

  - clients (threads driving the ktune CLI): each owns two "lineages", a set
    of small workloads only it tunes, and submits jobs over them one after
    another (random trials, rounds, priorities and policies), following each
    job by `ktune watch --json`, by polling `ktune status --json`, or by
    cancelling it after a while and then polling; the next job of a lineage
    continues from what the store holds (--trials above it, or --more);
  - a QueryBest prober (grpcprobe.py probe) on its own channel;
  - a sampler of the tracker's RSS, open fds and threads (/proc) and of the
    store's record count, every 2 s;
  - the fault schedule, drawn from SEED before the run (random.Random(SEED)):
    kill (SIGKILL, restart after a while; the tracker on the same store),
    stop (SIGSTOP, SIGCONT), link (down, up), netem (loss and delay, where the
    kernel has sch_netem), throttle (tbf rate limit), diskfull (the store's
    tmpfs filled by dd, then freed), kcrash / khang (a runner's measuring
    child gets SIGSEGV / SIGSTOP), ccrash (a worker's compiler gets SIGKILL),
    hungwatch (grpcprobe.py hang: WatchJob streams never read).

Then the faults end, the clients' last jobs run out (at most --drain s), the
daemons get SIGTERM, and the checks run against the store. Definitions:

  acknowledged  a job's total_trials in a JobProgress a client saw (watch,
                status, cancel): the tracker said those records are stored.
  lineage total the final total_trials of the lineage's last job: every record
                of its workloads (a job counts its tasks' stored records).
  client count  the sum of the lineage totals: what the clients, from what they
                were told, expect the store to hold.

Checks: (1) every job ended done, or cancelled when a client cancelled it;
no job the clients do not know of; (2) per job, records with its job id =
its final total_trials - the total its lineage had before it; its totals
never went down and its largest acknowledged total is at most its final one;
(3) no (workload, target, state_hash) stored twice; (4) the store's records
= the client count = the store's own view of each lineage (ktune status
--db); (5) no daemon died unasked; (6) the tracker's RSS, fds and threads
over the last half of the run stay within 1.5 x + a constant of the warm-up's
(first quarter, and past the first store-model training) maximum; (7) every
daemon exited on SIGTERM (soak.sh then checks that nothing is left in the
namespaces). Figures: QueryBest p50/p99,
dispatch rate, resource maxima, fault counts.
"""
import argparse
import calendar
import heapq
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time

T0 = time.monotonic()
_log_mu = threading.Lock()


def now():
    return time.monotonic() - T0


def log(msg):
    with _log_mu:
        print(f"[{now():7.1f}] {msg}", flush=True)


TRACKER_IP = "198.18.1.1"
TRACKER = TRACKER_IP + ":9190"
HTTP = TRACKER_IP + ":9191"
NS_TR, NS_H = "ktsoak-tr", ["ktsoak-h1", "ktsoak-h2"]
HOST_IP = ["198.18.0.2", "198.18.0.6"]
LINKS = {"t1": "host 1", "t2": "host 2", "tc": "clients"}
KEY = "cpu-soak"

A = None          # parsed arguments
D = None          # the soak's directory
ENV = None        # environment of every child: no KT_TOKEN_FILE, log level info
STOPPING = threading.Event()


def kt(*parts):
    return os.path.join(A.build, *parts)


# ---- Daemons ------------------------------------------------------------------------------

class Daemon:
    """One daemon under `ip netns exec NS` (which execs it in place: the pid is
    the daemon's), started through setpriv --pdeathsig KILL from the main
    thread, so it dies with the orchestrator."""

    def __init__(self, name, ns, argv, ready_file=None):
        self.name, self.ns, self.argv, self.ready_file = name, ns, argv, ready_file
        self.proc = None
        self.state = "down"      # down | starting | up | stopped | killed
        self.held = 0            # faults holding it down or stopped
        self.starts = 0
        self.start_t = 0.0
        self.failed_starts = 0
        self.unexpected = []     # (time, rc, log tail)
        self.retry_at = None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def log_path(self):
        return os.path.join(D, "logs", self.name + ".log")

    def start(self):
        if self.ready_file and os.path.exists(self.ready_file):
            os.unlink(self.ready_file)
        logf = open(self.log_path, "ab")
        logf.write(f"---- start {self.starts + 1} at {now():.1f} s\n".encode())
        logf.flush()
        self.proc = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "ip", "netns", "exec", self.ns] + self.argv,
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=ENV)
        logf.close()
        self.starts += 1
        self.start_t = now()
        self.state = "starting" if self.ready_file else "up"
        self.retry_at = None

    def ready(self):
        return self.state == "up"

    def poll_start(self):
        """A starting tracker is up once its port file exists."""
        if self.state == "starting" and self.ready_file and os.path.exists(self.ready_file):
            self.state = "up"
            log(f"{self.name} serving (pid {self.pid}, start {self.starts}, "
                f"{now() - self.start_t:.1f} s)")

    def signal(self, sig):
        if self.alive():
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def log_tail(self, n=5):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:]).rstrip()
        except OSError:
            return ""


DAEMONS = {}
_dmu = threading.Lock()


def make_daemons():
    tok, ca = os.path.join(D, "token"), os.path.join(D, "ca.pem")
    store = os.path.join(D, "store", "ktune.db")
    DAEMONS["tracker"] = Daemon(
        "tracker", NS_TR,
        [kt("tracker", "ktune-tracker"), "--listen", TRACKER, "--http", HTTP,
         "--heartbeat-ms", "1000", "--db", store, "--token-file", tok,
         "--port-file", os.path.join(D, "tracker.port"),
         "--tls-cert", os.path.join(D, "tracker.pem"), "--tls-key", os.path.join(D, "tracker.key"),
         "--tls-ca", ca],
        ready_file=os.path.join(D, "tracker.port"))
    for h in range(2):
        cert = [  "--tls-cert", os.path.join(D, f"host{h + 1}.pem"),
                "--tls-key", os.path.join(D, f"host{h + 1}.key"), "--tls-ca", ca]
        for r in range(2):
            DAEMONS[f"h{h + 1}-runner{r + 1}"] = Daemon(
                f"h{h + 1}-runner{r + 1}", NS_H[h],
                [kt("server", "ktune-runner"), "--tracker", TRACKER,
                 "--listen", f"{HOST_IP[h]}:{9200 + r}", "--key", KEY, "--timer", "cpu",
                 "--drain-ms", "5000", "--token-file", tok] + cert)
        DAEMONS[f"h{h + 1}-worker"] = Daemon(
            f"h{h + 1}-worker", NS_H[h],
            [kt("worker", "ktune-worker"), "--tracker", TRACKER, "--listen", f"{HOST_IP[h]}:9300",
             "--jobs", "1", "--cache-dir", os.path.join(D, f"cache-h{h + 1}"),
             "--token-file", tok] + cert)


def check_daemons():
    """Main thread: notice starts, retry a tracker that could not start,
    restart a daemon that died unasked."""
    with _dmu:
        for d in DAEMONS.values():
            d.poll_start()
            if d.state in ("starting", "up", "stopped") and not d.alive():
                rc = d.proc.returncode
                if d.state == "starting" and d.name == "tracker":
                    d.failed_starts += 1
                    log(f"tracker did not start (status {rc}): {d.log_tail(1)}; again in 2 s")
                    d.state, d.retry_at = "down", now() + 2.0
                    continue
                tail = d.log_tail()
                d.unexpected.append((now(), rc, tail))
                log(f"UNEXPECTED: {d.name} (pid {d.pid}) exited with status {rc} unasked:\n"
                    + "\n".join("    " + ln for ln in tail.splitlines()))
                d.state, d.retry_at = "down", now() + 1.0
            if d.state == "down" and d.held == 0 and d.retry_at is not None and \
                    now() >= d.retry_at and not STOPPING.is_set():
                d.start()


# ---- Runner and worker children ----------------------------------------------------------

def children(pid):
    """Children of pid: from /proc/PID/task/*/children where the kernel has
    it (cheap enough to poll every few ms), else a walk of /proc."""
    try:
        out = []
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
        return out
    except (OSError, ValueError):
        pass
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                s = f.read()
            fields = s[s.rindex(")") + 2:].split()
            if int(fields[1]) == pid:
                out.append(int(e))
        except (OSError, ValueError):
            pass
    return out


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


# ---- The ktune CLI --------------------------------------------------------------------------

def conn():
    return ["--tracker", TRACKER, "--token-file", os.path.join(D, "token"),
            "--tls-ca", os.path.join(D, "ca.pem")]


def cli(args, timeout=20, tracker=True):
    cmd = [kt("cli", "ktune")] + args + (conn() if tracker else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out, "timed out"


# ---- Clients --------------------------------------------------------------------------------

TERMINAL = ("done", "cancelled", "failed")


class Job:
    def __init__(self, jid, lineage, client, mode, prev_total, args, t):
        self.id, self.lineage, self.client, self.mode = jid, lineage, client, mode
        self.prev_total = prev_total
        self.args = args
        self.submitted = t
        self.seen = []              # (t, total_trials, state, source)
        self.cancel_asked = False
        self.final_state = None
        self.final_total = None
        self.watch_refused = 0
        self.watch_runs = 0

    def ack(self, p, source):
        if not isinstance(p, dict) or p.get("job_id") != self.id:
            return
        self.seen.append((now(), int(p.get("total_trials", 0)), p.get("state", "?"), source))

    @property
    def max_seen(self):
        return max((s[1] for s in self.seen), default=0)

    @property
    def last_state(self):
        return self.seen[-1][2] if self.seen else None


class Lineage:
    def __init__(self, name, workloads):
        self.name, self.workloads = name, workloads
        self.keys = []
        self.total = 0              # final total of its last ended job
        self.jobs = []
        self.unresolved = False


JOBS = {}
_jmu = threading.Lock()
COUNTS = {"submit_fail": 0, "submit_ambiguous": 0, "submit_store_full": 0, "existing": 0,
          "watch_refused": 0, "cli_unreachable": 0}


def transient(rc, err):
    """A CLI failure that says only that the tracker could not be reached
    (killed, stopped, link down) or is stopping."""
    return rc == 124 or any(w in err for w in ("cannot reach", "did not answer", "stopping",
                                                "UNAVAILABLE", "DEADLINE_EXCEEDED"))


def count(k, n=1):
    with _jmu:
        COUNTS[k] = COUNTS.get(k, 0) + n


def lineage_workloads(g):
    """Small workloads (a round builds in seconds), distinct for every lineage g."""
    kind = g % 3
    if kind == 0:
        return [{"op": "matmul", "M": 8, "N": 16, "K": 8 * (g + 2)}]
    if kind == 1:
        return [{"op": "dense", "M": 8, "N": 8 * (g + 2), "K": 16},
                {"op": "matmul", "M": 16, "N": 8, "K": 8 * (g + 2)}]
    return [{"op": "conv2d_nhwc", "N": 1, "H": 6, "W": 6, "CI": 4, "CO": 4 * (g + 1),
             "KH": 3, "KW": 3, "padding": [1, 1]}]


def workload_key(w):
    rc, out, err = cli(["kernel", "sample", "--workload", json.dumps(w), "-n", "1"],
                       tracker=False, timeout=60)
    for line in out.splitlines():
        if line.startswith("workload "):
            return line[len("workload "):].strip()
    raise RuntimeError(f"no key for {w}: {err}")


class Client(threading.Thread):
    def __init__(self, idx, seed, deadline, hard_end):
        super().__init__(name=f"client{idx}", daemon=True)
        self.idx = idx
        self.rng = random.Random(seed * 1000 + idx)
        self.deadline, self.hard_end = deadline, hard_end
        self.lineages = [Lineage(f"c{idx}l{i}", lineage_workloads(2 * idx + i)) for i in range(2)]
        self.jobs = []
        self.max_jobs = 400
        self.errors = []

    def say(self, msg):
        log(f"client{self.idx}: {msg}")

    def status(self, job, source="status"):
        rc, out, err = cli(["status", str(job.id), "--json", "--timeout", "8000"], timeout=15)
        if rc == 0:
            try:
                p = json.loads(out)
            except ValueError:
                return None
            job.ack(p, source)
            return p
        if transient(rc, err):
            count("cli_unreachable")
        else:
            self.errors.append(f"status {job.id} failed ({rc}): {err.strip()}")
        return None

    def submit(self, lin):
        rng = self.rng
        add = rng.randint(8, 24)
        ntasks = len(lin.workloads)
        per_round = rng.choice([4, 8, 8])
        args = ["--workload", json.dumps(lin.workloads), "--key", KEY,
                "--per-round", str(per_round),
                "--priority", str(rng.randint(0, 3)),
                "--policy", rng.choice(["sketch.random", "sketch.random", "sketch.xgb"]),
                "--number", "2", "--repeat", "1",
                "--min-repeat-ms", str(rng.choice([0, 0, 10, 40])),
                "--run-timeout-ms", "3000", "--seed", str(rng.randint(0, 1 << 30))]
        if rng.random() < 0.3 and lin.total > 0:
            args += ["--more", str(max(add, ntasks))]
        else:
            args += ["--trials", str(lin.total + max(add, ntasks))]
        mode = rng.choices(["watch", "poll", "cancel"], weights=[4, 2, 2])[0]
        t = now()
        # One request id for every attempt of this submission: a retry whose
        # first answer was lost gets the job the tracker made, not a second.
        rid = f"soak-c{self.idx}-{rng.getrandbits(64):016x}"
        while now() < self.hard_end:
            rc, out, err = cli(["submit"] + args + ["--request-id", rid, "--json", "--timeout",
                                                    "8000"], timeout=20)
            if rc == 0:
                try:
                    answer = json.loads(out)
                    jid = int(answer["job_id"])
                    if answer.get("existing"):
                        count("existing")
                except (ValueError, KeyError):
                    self.errors.append(f"submit printed {out!r}")
                    return None
                job = Job(jid, lin, self.idx, mode, lin.total, args, t)
                with _jmu:
                    JOBS[jid] = job
                return job
            count("submit_fail")
            if "disk is full" in err or "file system is full" in err:
                # Refused: the store could not commit the job (nothing made).
                count("submit_store_full")
                time.sleep(1 + rng.random())
                continue
            if rc == 2 or not transient(rc, err):
                self.errors.append(f"submit failed ({rc}): {err.strip()}")
                self.say(f"submit refused ({rc}): {err.strip()}")
                return None
            # The tracker may have made the job before the answer was lost:
            # the retry under the same request id returns it ("existing").
            count("submit_ambiguous")
            time.sleep(1 + rng.random())
        return None
        return None

    def wait_terminal(self, job):
        """Poll until the job ends (or the soak's hard end)."""
        while now() < self.hard_end:
            p = self.status(job)
            if p and p.get("state") in TERMINAL:
                return p
            time.sleep(0.5 + self.rng.random() * 2.0)
        return None

    def watch(self, job):
        while now() < self.hard_end:
            job.watch_runs += 1
            cmd = [kt("cli", "ktune"), "watch", str(job.id), "--json"] + conn()
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=ENV)
            timer = threading.Timer(max(1.0, self.hard_end - now()), p.kill)
            timer.start()
            for line in p.stdout:
                try:
                    job.ack(json.loads(line), "watch")
                except ValueError:
                    pass
            p.wait()
            timer.cancel()
            err = p.stderr.read()
            if "RESOURCE_EXHAUSTED" in err:
                job.watch_refused += 1
                count("watch_refused")
                return self.wait_terminal(job)
            st = self.status(job)
            if st and st.get("state") in TERMINAL:
                return st
            time.sleep(1.0)
        return None

    def follow(self, job):
        if job.mode == "watch":
            return self.watch(job)
        if job.mode == "poll":
            return self.wait_terminal(job)
        # cancel: a while, then cancel until the tracker says it has ended
        until = now() + self.rng.uniform(1.0, 20.0)
        while now() < until and now() < self.hard_end:
            p = self.status(job)
            if p and p.get("state") in TERMINAL:
                return p
            time.sleep(1.0)
        while now() < self.hard_end:
            job.cancel_asked = True
            rc, out, err = cli(["cancel", str(job.id), "--json", "--timeout", "8000"], timeout=45)
            if rc == 0:
                try:
                    job.ack(json.loads(out), "cancel")
                except ValueError:
                    pass
                break
            if f"job {job.id} is " in err:
                # Ended already: the answer to an earlier attempt that did
                # reach the tracker was lost, or the job ended first.
                break
            if not transient(rc, err):
                self.errors.append(f"cancel {job.id} failed ({rc}): {err.strip()}")
                break
            time.sleep(1.0)
        return self.wait_terminal(job)

    def run(self):
        try:
            for lin in self.lineages:
                lin.keys = [workload_key(w) for w in lin.workloads]
            while now() < self.deadline and len(self.jobs) < self.max_jobs and \
                    not STOPPING.is_set():
                lin = self.rng.choice(self.lineages)
                job = self.submit(lin)
                if job is None:
                    time.sleep(1.0)
                    continue
                self.jobs.append(job)
                lin.jobs.append(job)
                self.say(f"job {job.id} ({lin.name}, {job.mode}, "
                         f"{' '.join(job.args[job.args.index('--per-round'):][:4])}, "
                         f"{job.args[-2]} {job.args[-1]}) submitted")
                p = self.follow(job)
                if p is None:
                    lin.unresolved = True
                    self.say(f"job {job.id} had not ended by the soak's end")
                    break
                # The final figures, once more after a pause: an ended job's
                # total must not move any more.
                time.sleep(0.5)
                q = self.status(job) or p
                job.final_state, job.final_total = q.get("state"), int(q.get("total_trials", 0))
                lin.total = job.final_total
                self.say(f"job {job.id} {job.final_state}, {job.final_total} trials "
                         f"({job.final_total - job.prev_total} new)")
        except Exception as e:  # a bug of the soak itself: report, do not hide
            self.errors.append(f"client crashed: {e!r}")
            log(f"client{self.idx}: crashed: {e!r}")


# ---- Sampling -------------------------------------------------------------------------------

SAMPLES = []       # (t, pid, rss_kib, fds, threads)
WALL0 = [0.0]      # time.time() at T0: the daemons' log lines carry wall-clock times
TERM_BAD = []      # daemons that did not exit cleanly on a SIGTERM fault
RECORDS = []       # (t, records in the store)
OTHER_RSS = {}     # daemon -> max RSS KiB


def proc_figures(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            st = f.read()
        rss = int(st.split("VmRSS:")[1].split()[0])
        thr = int(st.split("Threads:")[1].split()[0])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return rss, fds, thr
    except (OSError, IndexError, ValueError):
        return None


def store_records():
    db = os.path.join(D, "store", "ktune.db")
    try:
        c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)
        try:
            return c.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        finally:
            c.close()
    except sqlite3.Error:
        return None


def first_store_model_training():
    """Seconds from T0 to the tracker's first store-model training (its
    log's "store model of ... trained" line), or None."""
    try:
        with open(DAEMONS["tracker"].log_path, errors="replace") as f:
            for line in f:
                if ": store model of " not in line or " trained" not in line:
                    continue
                try:   # the log's times are UTC
                    wall = calendar.timegm(time.strptime(line[:19], "%Y-%m-%dT%H:%M:%S"))
                    if line[19:20] == ".":
                        wall += float(line[19:23])
                except ValueError:
                    continue
                return wall - WALL0[0]
    except OSError:
        pass
    return None


def sampler(end):
    n = 0
    while not STOPPING.is_set() and now() < end:
        tr = DAEMONS["tracker"]
        if tr.state == "up" and tr.alive():
            f = proc_figures(tr.pid)
            if f:
                SAMPLES.append((now(), tr.pid) + f)
        for name, d in DAEMONS.items():
            if name != "tracker" and d.alive():
                f = proc_figures(d.pid)
                if f:
                    OTHER_RSS[name] = max(OTHER_RSS.get(name, 0), f[0])
        if n % 3 == 0:
            r = store_records()
            if r is not None:
                RECORDS.append((now(), r))
        n += 1
        time.sleep(2.0)


# ---- Faults -------------------------------------------------------------------------------

FAULT_KINDS = [  # kind, weight, (min, max) duration s
    ("kill", 4, (1.0, 6.0)),
    ("term", 2, (1.0, 4.0)),
    ("stop", 4, (1.0, 8.0)),
    ("link", 2, (2.0, 10.0)),
    ("netem", 1, (5.0, 20.0)),
    ("throttle", 1, (5.0, 20.0)),
    ("diskfull", 2, (4.0, 15.0)),
    ("kcrash", 2, (0.0, 0.0)),
    ("khang", 2, (0.0, 0.0)),
    ("ccrash", 1, (0.0, 0.0)),
    ("hungwatch", 1, (10.0, 40.0)),
]
DAEMON_NAMES = ["tracker", "h1-worker", "h1-runner1", "h1-runner2", "h2-worker", "h2-runner1",
                "h2-runner2"]


def draw_schedule(seed, start, end):
    """The fault schedule: a pure function of the seed and the run's length.
    Each fault holds resources (a daemon, a link, the disk, ...); one that
    would overlap another on the same resource, or a third fault at once, is
    drawn again."""
    rng = random.Random(seed)
    kinds = [k for k, _, _ in FAULT_KINDS]
    weights = [w for _, w, _ in FAULT_KINDS]
    dur = {k: d for k, _, d in FAULT_KINDS}
    busy = []            # (start, end, resource)
    out = []
    t = start
    while True:
        t += rng.uniform(2.0, 9.0)
        if t >= end - 3:
            break
        for _ in range(10):
            kind = rng.choices(kinds, weights)[0]
            if kind in ("kill", "stop", "term"):
                # The tracker is one daemon of seven but the one that matters
                # most: about a third of these faults (half of the SIGTERMs).
                share = 0.5 if kind == "term" else 0.3
                target = "tracker" if rng.random() < share else rng.choice(DAEMON_NAMES[1:])
            elif kind in ("kcrash", "khang"):
                target = rng.choice([n for n in DAEMON_NAMES if "runner" in n])
            elif kind == "ccrash":
                target = rng.choice(["h1-worker", "h2-worker"])
            elif kind in ("link", "netem", "throttle"):
                target = rng.choice(sorted(LINKS))
            else:
                target = kind
            lo, hi = dur[kind]
            d = round(rng.uniform(lo, hi), 1)
            hold = max(d, 20.0 if kind in ("kcrash", "khang", "ccrash") else d)
            fend = min(t + hold, end)
            overlap = [b for b in busy if b[0] < fend and t < b[1]]
            if any(b[2] == target for b in overlap) or len(overlap) >= 2:
                continue
            busy.append((t, fend, target))
            out.append({"t": round(t, 1), "kind": kind, "target": target, "dur": d,
                        "p": rng.random()})
            break
    return out


class Chaos:
    def __init__(self, schedule):
        self.schedule = schedule
        self.events = []         # heap (t, seq, fn, label)
        self.seq = 0
        self.log = []            # (start, end, kind, target, note)
        self.counts = {}
        self.skipped = {}
        self.netem_ok = None
        self.tbf_ok = None
        self.hung = []
        self.finishing = False
        self.fill = os.path.join(D, "store", "fill")
        for f in schedule:
            self.at(f["t"], lambda f=f: self.begin(f), f"{f['kind']} {f['target']}")

    def at(self, t, fn, label=""):
        heapq.heappush(self.events, (t, self.seq, fn, label))
        self.seq += 1

    def note(self, f, msg):
        log(f"fault {f['kind']} {f['target']}: {msg}")

    def probe_qdiscs(self):
        dev = "ktsoak-tc"
        r = subprocess.run(["ip", "netns", "exec", NS_TR, "tc", "qdisc", "add", "dev", dev,
                            "root", "netem", "delay", "1ms"], capture_output=True, text=True)
        self.netem_ok = r.returncode == 0
        if self.netem_ok:
            subprocess.run(["ip", "netns", "exec", NS_TR, "tc", "qdisc", "del", "dev", dev, "root"],
                           capture_output=True)
        else:
            log("netem: not available here (tc: " + (r.stderr.strip() or "failed") +
                "; the kernel lacks sch_netem): the netem faults (loss and delay) are skipped")
        r = subprocess.run(["ip", "netns", "exec", NS_TR, "tc", "qdisc", "add", "dev", dev,
                            "root", "tbf", "rate", "1mbit", "burst", "16kb", "latency", "100ms"],
                           capture_output=True, text=True)
        self.tbf_ok = r.returncode == 0
        if self.tbf_ok:
            subprocess.run(["ip", "netns", "exec", NS_TR, "tc", "qdisc", "del", "dev", dev, "root"],
                           capture_output=True)
        else:
            log("tbf: not available here: the throttle faults are skipped")

    def skip(self, f, why):
        self.skipped[f["kind"]] = self.skipped.get(f["kind"], 0) + 1
        self.note(f, "skipped: " + why)

    def record(self, f, start, end, note=""):
        self.counts[f["kind"]] = self.counts.get(f["kind"], 0) + 1
        self.log.append((start, end, f["kind"], f["target"], note))

    def begin(self, f):
        k, tg, d = f["kind"], f["target"], f["dur"]
        t = now()
        if k in ("kill", "stop"):
            dm = DAEMONS[tg]
            if dm.state not in ("up", "starting") or not dm.alive():
                return self.skip(f, f"{tg} is {dm.state}")
            if k == "kill":
                dm.held += 1
                dm.signal(signal.SIGKILL)
                dm.proc.wait()
                dm.state = "killed"
                self.note(f, f"SIGKILL pid {dm.pid}; restart in {d} s")

                def restart(dm=dm, f=f, t=t):
                    dm.held -= 1
                    if dm.held == 0 and not STOPPING.is_set():
                        dm.start()
                    self.record(f, t, now())
                self.at(now() + d, restart)
            else:
                dm.held += 1
                dm.signal(signal.SIGSTOP)
                dm.state = "stopped"
                self.note(f, f"SIGSTOP pid {dm.pid} for {d} s")

                def cont(dm=dm, f=f, t=t):
                    dm.held -= 1
                    dm.signal(signal.SIGCONT)
                    if dm.state == "stopped":
                        dm.state = "up"
                    self.record(f, t, now())
                self.at(now() + d, cont)
        elif k == "term":
            dm = DAEMONS[tg]
            if dm.state != "up" or not dm.alive():
                return self.skip(f, f"{tg} is {dm.state}")
            dm.held += 1
            dm.signal(signal.SIGTERM)
            dm.state = "terminating"
            t_sig = now()
            self.note(f, f"SIGTERM pid {dm.pid}; restart {d} s after it exits")

            def after(dm=dm, f=f, t=t, t_sig=t_sig):
                if dm.alive() and not self.finishing and now() - t_sig < 30:
                    self.at(now() + 0.5, after)
                    return
                try:
                    dm.proc.wait(timeout=max(0.1, 30 - (now() - t_sig)))
                    rc = dm.proc.returncode
                    if rc != 0:
                        TERM_BAD.append(f"{dm.name} at {t_sig:.0f} s: exit status {rc} on "
                                        "SIGTERM")
                except subprocess.TimeoutExpired:
                    TERM_BAD.append(f"{dm.name} at {t_sig:.0f} s: still running 30 s after "
                                    "SIGTERM")
                    dm.signal(signal.SIGKILL)
                    dm.proc.wait()
                    rc = dm.proc.returncode
                self.note(f, f"exited with status {rc} {now() - t_sig:.1f} s after SIGTERM")
                dm.state = "killed"

                def restart(dm=dm, f=f, t=t):
                    dm.held -= 1
                    if dm.held == 0 and not STOPPING.is_set():
                        dm.start()
                    self.record(f, t, now())
                if self.finishing:
                    restart()
                else:
                    self.at(now() + d, restart)
            self.at(now() + 0.5, after)
        elif k == "link":
            dev = "ktsoak-" + tg
            subprocess.run(["ip", "-n", NS_TR, "link", "set", dev, "down"], check=False)
            self.note(f, f"{dev} ({LINKS[tg]}) down for {d} s")

            def up(dev=dev, f=f, t=t):
                subprocess.run(["ip", "-n", NS_TR, "link", "set", dev, "up"], check=False)
                self.record(f, t, now())
            self.at(now() + d, up)
        elif k in ("netem", "throttle"):
            if (k == "netem" and not self.netem_ok) or (k == "throttle" and not self.tbf_ok):
                return self.skip(f, f"{'sch_netem' if k == 'netem' else 'tbf'} not available")
            dev = "ktsoak-" + tg
            if k == "netem":
                loss = 1 + int(f["p"] * 20)
                q = ["netem", "delay", f"{20 + int(f['p'] * 200)}ms", "20ms", "loss", f"{loss}%"]
            else:
                q = ["tbf", "rate", f"{64 + int(f['p'] * 448)}kbit", "burst", "8kb",
                     "latency", "300ms"]
            r = subprocess.run(["ip", "netns", "exec", NS_TR, "tc", "qdisc", "add", "dev", dev,
                                "root"] + q, capture_output=True, text=True)
            if r.returncode != 0:
                return self.skip(f, "tc: " + r.stderr.strip())
            self.note(f, f"{dev} ({LINKS[tg]}): {' '.join(q)} for {d} s")

            def clear(dev=dev, f=f, t=t):
                subprocess.run(["ip", "netns", "exec", NS_TR, "tc", "qdisc", "del", "dev", dev,
                                "root"], capture_output=True)
                self.record(f, t, now())
            self.at(now() + d, clear)
        elif k == "diskfull":
            subprocess.run(["dd", "if=/dev/zero", "of=" + self.fill, "bs=64k"],
                           capture_output=True)
            st = os.statvfs(os.path.dirname(self.fill))
            self.note(f, f"store's file system filled ({st.f_bavail * st.f_frsize} bytes free) "
                         f"for {d} s")

            def free(f=f, t=t):
                try:
                    os.unlink(self.fill)
                except OSError:
                    pass
                self.record(f, t, now())
            self.at(now() + d, free)
        elif k in ("kcrash", "khang", "ccrash"):
            dm = DAEMONS[tg]
            if dm.state != "up":
                return self.skip(f, f"{tg} is {dm.state}")
            threading.Thread(target=self.hit_child, args=(f, dm, t), daemon=True).start()
        elif k == "hungwatch":
            chans = 1 + int(f["p"] * 3)
            streams = 2 + int(f["p"] * 5)
            p = subprocess.Popen(
                [sys.executable, os.path.join(os.path.dirname(__file__), "grpcprobe.py"), "hang",
                 "--pb", os.path.join(D, "pb"), "--tracker", TRACKER,
                 "--token-file", os.path.join(D, "token"), "--ca", os.path.join(D, "ca.pem"),
                 "--channels", str(chans), "--streams", str(streams), "--hold", str(d),
                 "--seed", str(int(f["p"] * 1e6))],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True)
            self.hung.append(p)
            self.note(f, f"{chans} connection(s) x {streams} WatchJob streams never read, "
                         f"for {d} s (pid {p.pid})")

            def done(p=p, f=f, t=t):
                try:
                    out, _ = p.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, _ = p.communicate()
                note = out.strip().replace("\n", " ")
                self.note(f, "ended: " + note)
                self.record(f, t, now(), note)
            self.at(now() + d + 1.0, done)

    def hit_child(self, f, dm, t):
        """kcrash: SIGSEGV the runner's timing child; khang: SIGSTOP it (the
        runner's run timeout must kill it); ccrash: SIGKILL a worker's
        compiler. Waits up to 20 s for such a child."""
        k = f["kind"]
        sig = {"kcrash": signal.SIGSEGV, "khang": signal.SIGSTOP, "ccrash": signal.SIGKILL}[k]
        end = time.monotonic() + 20.0
        while time.monotonic() < end and not STOPPING.is_set():
            pid = dm.pid
            if pid and dm.state == "up":
                kids = children(pid)
                if k == "ccrash":   # the worker's build child, then its compiler
                    kids = [g for c in kids for g in children(c) + [c]]
                for c in kids:
                    try:
                        os.kill(c, sig)
                    except ProcessLookupError:
                        continue
                    self.note(f, f"{signal.Signals(sig).name} to pid {c} ({comm(c)}), "
                                 f"child of {dm.name}")
                    self.record(f, t, now())
                    return
            time.sleep(0.005)
        self.skip(f, f"{dm.name} started no child in 20 s")

    def step(self, until):
        """Run due events until `until` (main thread)."""
        while self.events and self.events[0][0] <= now() and now() < until:
            _, _, fn, _ = heapq.heappop(self.events)
            fn()

    def finish(self):
        """Run the pending end actions (restarts, SIGCONTs, links up) now and
        drop the faults not begun."""
        self.finishing = True
        while self.events:
            pend = []
            while self.events:
                t, _, fn, label = heapq.heappop(self.events)
                if not label:          # an end action
                    pend.append(fn)
            for fn in pend:
                fn()
        for p in self.hung:
            if p.poll() is None:
                p.kill()
                p.wait()


# ---- Checks ---------------------------------------------------------------------------------

def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[i]


def main():
    global A, D, ENV, T0
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--drain", type=float, default=90.0)
    A = ap.parse_args()
    D = A.dir
    ENV = {k: v for k, v in os.environ.items() if k not in ("KT_TOKEN_FILE", "KT_LOG_LEVEL")}
    ENV["KT_LOG_LEVEL"] = "info"

    def on_term(sig, _frame):
        raise SystemExit(128 + sig)
    signal.signal(signal.SIGTERM, on_term)

    duration = A.minutes * 60.0
    chaos_start = min(15.0, duration / 8)
    schedule = draw_schedule(A.seed, chaos_start, duration)
    with open(os.path.join(D, "schedule.json"), "w") as f:
        json.dump(schedule, f, indent=0)
    kinds = {}
    for s in schedule:
        kinds[s["kind"]] = kinds.get(s["kind"], 0) + 1
    log(f"schedule (seed {A.seed}): {len(schedule)} faults from {chaos_start:.0f} s to "
        f"{duration:.0f} s: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))

    make_daemons()
    checks = []     # (name, ok, detail)
    chaos = None
    clients = []
    probe = None
    try:
        chaos = Chaos(schedule)
        chaos.probe_qdiscs()
        with _dmu:
            for d in DAEMONS.values():
                d.start()
        t_wait = now() + 60
        while now() < t_wait and not DAEMONS["tracker"].ready():
            check_daemons()
            time.sleep(0.1)
        if not DAEMONS["tracker"].ready():
            raise RuntimeError("the tracker did not start: " + DAEMONS["tracker"].log_tail())
        # The run's clock starts once every peer is registered.
        for _ in range(120):
            rc, out, _ = cli(["queue", "--json"])
            try:
                peers = json.loads(out).get("peers", []) if rc == 0 else []
            except ValueError:
                peers = []
            if len(peers) == 6:
                break
            check_daemons()
            time.sleep(0.5)
        else:
            raise RuntimeError(f"not every runner and worker registered: {out}")
        T0 = time.monotonic()
        WALL0[0] = time.time()
        log("every daemon up: 1 tracker, 2 workers, 4 runners; the run starts")
        hard_end = duration + A.drain
        probe_out = os.path.join(D, "probe.jsonl")
        probe = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__), "grpcprobe.py"), "probe",
             "--pb", os.path.join(D, "pb"), "--tracker", TRACKER,
             "--token-file", os.path.join(D, "token"), "--ca", os.path.join(D, "ca.pem"),
             "--out", probe_out, "--seed", str(A.seed)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(D, "logs", "probe.log"), "w"))
        samp = threading.Thread(target=sampler, args=(hard_end,), daemon=True)
        samp.start()
        clients = [Client(i, A.seed, duration, hard_end) for i in range(A.clients)]
        for c in clients:
            c.start()
        while now() < duration:
            check_daemons()
            chaos.step(duration)
            time.sleep(0.1)
        log("chaos over: ending the faults still on; the clients' last jobs run out")
        chaos.finish()
        with _dmu:
            for d in DAEMONS.values():
                if d.state == "stopped":
                    d.signal(signal.SIGCONT)
                    d.state = "up"
            try:
                os.unlink(chaos.fill)
            except OSError:
                pass
        drain_start = now()
        while any(c.is_alive() for c in clients) and now() < hard_end:
            check_daemons()
            time.sleep(0.2)
        drain_s = now() - drain_start
        log(f"clients finished ({drain_s:.0f} s after the chaos)")
        STOPPING.set()
        time.sleep(1.0)
        probe.terminate()
        probe.wait()

        # ---- Stop every daemon: SIGTERM, then look ----
        t_term = now()
        slow = []
        with _dmu:
            for name in DAEMON_NAMES:
                DAEMONS[name].signal(signal.SIGCONT)
                DAEMONS[name].signal(signal.SIGTERM)
            for name in DAEMON_NAMES:
                d = DAEMONS[name]
                if d.proc is None:
                    continue
                try:
                    d.proc.wait(timeout=max(1.0, 30.0 - (now() - t_term)))
                except subprocess.TimeoutExpired:
                    slow.append(name)
                    d.signal(signal.SIGKILL)
                    d.proc.wait()
        bad = TERM_BAD + [f"{n} at the end: still running 30 s after SIGTERM" for n in slow]
        checks.append(("every daemon exited on SIGTERM", not bad,
                       f"all exited ({chaos.counts.get('term', 0)} SIGTERM faults and the end)"
                       if not bad else "; ".join(bad)))
        run_checks(checks, clients, chaos, duration, drain_s, probe_out)
    except SystemExit:
        log("stopped by a signal")
        checks.append(("the run completed", False, "interrupted"))
    except Exception as e:
        import traceback
        traceback.print_exc()
        checks.append(("the run completed", False, repr(e)))
    finally:
        STOPPING.set()
        if probe and probe.poll() is None:
            probe.kill()
        if chaos:
            for p in chaos.hung:
                if p.poll() is None:
                    p.kill()
        for d in DAEMONS.values():
            if d.alive():
                d.signal(signal.SIGCONT)
                d.signal(signal.SIGKILL)
                d.proc.wait()
    failed = [c for c in checks if not c[1]]
    njobs = len(JOBS)
    nrec = RECORDS[-1][1] if RECORDS else 0
    nfaults = len(chaos.log) if chaos else 0
    summary = (f"soak: {'PASS' if checks and not failed else 'FAILED'} "
               f"{len(checks) - len(failed)}/{len(checks)} checks held; "
               f"{A.minutes:g} min, seed {A.seed}, {nfaults} faults, {njobs} jobs, "
               f"{FINAL.get('records', nrec)} records"
               + ("; failed: " + "; ".join(c[0] for c in failed) if failed else ""))
    with open(A.summary, "w") as f:
        f.write(summary + "\n")
    print(summary, flush=True)
    return 0 if checks and not failed else 1


FINAL = {}


def run_checks(checks, clients, chaos, duration, drain_s, probe_out):
    db = os.path.join(D, "store", "ktune.db")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    total = con.execute("SELECT COUNT(*) FROM records").fetchone()[0]
    FINAL["records"] = total
    by_job = dict(con.execute("SELECT job_id, COUNT(*) FROM records GROUP BY job_id"))
    dups = con.execute("SELECT workload_key, target, state_hash, COUNT(*) FROM records "
                       "GROUP BY workload_key, target, state_hash HAVING COUNT(*) > 1").fetchall()
    errs = dict(con.execute("SELECT error_code, COUNT(*) FROM records GROUP BY error_code"))
    t_first, t_last = con.execute("SELECT MIN(timestamp), MAX(timestamp) FROM records").fetchone()
    con.close()

    # The store's own view of every job, without a tracker.
    rc, out, err = cli(["status", "--db", db, "--json"], tracker=False, timeout=60)
    try:
        stored_jobs = {p["job_id"]: p for p in json.loads(out).get("jobs", [])} if rc == 0 else {}
    except ValueError:
        stored_jobs = {}
    if rc != 0:
        checks.append(("ktune status --db reads the store", False, err.strip()))

    jobs = sorted(JOBS.values(), key=lambda j: j.id)
    lineages = [lin for c in clients for lin in c.lineages]

    # (1) every job ended as asked; none unknown
    bad, n_done, n_cancel, n_done_despite = [], 0, 0, 0
    for j in jobs:
        st = stored_jobs.get(j.id, {}).get("state")
        if j.final_state is None:
            bad.append(f"job {j.id}: not ended by the soak's end (store: {st})")
        elif j.final_state != st:
            bad.append(f"job {j.id}: the client saw {j.final_state}, the store says {st}")
        elif j.cancel_asked and st == "cancelled":
            n_cancel += 1
        elif j.cancel_asked and st == "done":
            n_done_despite += 1      # ended before the cancel reached it
        elif not j.cancel_asked and st == "done":
            n_done += 1
        else:
            bad.append(f"job {j.id}: {st}" + (" (cancel asked)" if j.cancel_asked else "")
                       + f": {stored_jobs.get(j.id, {}).get('message', '')}")
    unknown = sorted(set(stored_jobs) - set(JOBS))
    for u in unknown:
        p = stored_jobs[u]
        bad.append(f"job {u}: no client knows it ({p.get('state')}, "
                   f"{by_job.get(u, 0)} records of its own)")
    checks.append(("every job done, or cancelled as asked", not bad,
                   f"{n_done} done, {n_cancel} cancelled, {n_done_despite} done before their "
                   f"cancel" + ("; " + "; ".join(bad[:12]) if bad else "")))

    # (2) per job: its records = the trials it was acknowledged beyond its lineage's
    bad = []
    for j in jobs:
        if j.final_total is None:
            continue
        own = by_job.get(j.id, 0)
        if own != j.final_total - j.prev_total:
            bad.append(f"job {j.id}: {own} records stored with its id, but it reported "
                       f"{j.final_total} trials over the {j.prev_total} its lineage had")
        tots = [s[1] for s in j.seen]
        drops = [(a, b) for a, b in zip(tots, tots[1:]) if b < a]
        if drops:
            bad.append(f"job {j.id}: total_trials went down {drops[:3]}")
        if j.max_seen > j.final_total:
            bad.append(f"job {j.id}: acknowledged {j.max_seen} trials, ended with "
                       f"{j.final_total}")
    checks.append(("per job: records stored = trials acknowledged", not bad,
                   f"{len(jobs)} jobs" + ("; " + "; ".join(bad[:12]) if bad else "")))

    # (3) no state measured twice
    checks.append(("no (workload, target, state_hash) stored twice", not dups,
                   f"{total} records" + (f"; {len(dups)} repeated, e.g. {dups[:3]}"
                                         if dups else "")))

    # (4) the store's records = the clients' independent count
    client_count = sum(lin.total for lin in lineages)
    bad = []
    for lin in lineages:
        last = [j for j in lin.jobs if j.final_total is not None]
        if not last:
            continue
        view = stored_jobs.get(last[-1].id, {}).get("total_trials")
        if view != lin.total:
            bad.append(f"{lin.name}: the clients counted {lin.total}, the store's view of its "
                       f"last job {last[-1].id} is {view}")
    own_sum = sum(by_job.get(j.id, 0) for j in jobs)
    ok = total == client_count and own_sum == total and not bad
    checks.append(("store records = the clients' count", ok,
                   f"store {total}, clients {client_count} (sum of lineage totals), "
                   f"records of known jobs {own_sum}" + ("; " + "; ".join(bad) if bad else "")))

    # (5) no daemon died unasked
    une = [(d.name, t, rc) for d in DAEMONS.values() for (t, rc, _) in d.unexpected]
    checks.append(("no daemon died unasked", not une,
                   "none" if not une else ", ".join(f"{n} at {t:.0f} s (status {rc})"
                                                    for n, t, rc in une)))

    # (6) the tracker's resources. The warm-up also covers the tracker's
    # first store-model training (when it comes before half-time): a
    # training holds its memory for a moment, and one that first came after
    # a short warm-up was read as growth.
    half = duration / 2
    trained = first_store_model_training()
    warm_end = max(30.0, duration / 4)
    if trained is not None and trained + 4.0 <= half:
        warm_end = max(warm_end, trained + 4.0)
    warm = [s for s in SAMPLES if s[0] <= warm_end]
    late = [s for s in SAMPLES if half <= s[0] <= duration]
    figs = [f"warm-up 0-{warm_end:.0f} s (first store-model training: "
            + (f"{trained:.0f} s)" if trained is not None else "none)")]
    res_ok = bool(warm and late)
    for i, (name, unit, scale, const) in enumerate([("RSS", "MiB", 1024.0, 16.0),
                                                    ("fds", "", 1.0, 16.0),
                                                    ("threads", "", 1.0, 8.0)]):
        if not (warm and late):
            break
        wm = max(s[2 + i] for s in warm) / scale
        lm = max(s[2 + i] for s in late) / scale
        bound = 1.5 * wm + const
        held = lm <= bound
        res_ok = res_ok and held
        figs.append(f"{name} warm-up max {wm:.1f}{unit}, last-half max {lm:.1f}{unit}, "
                    f"bound 1.5 x {wm:.1f} + {const:g} = {bound:.1f}{unit}: "
                    f"{'held' if held else 'EXCEEDED'}")
    checks.append(("tracker RSS, fds and threads bounded after warm-up", res_ok,
                   "; ".join(figs) if len(figs) > 1 else "too few samples"))

    with open(os.path.join(D, "samples.jsonl"), "w") as f:
        for smp in SAMPLES:
            f.write(json.dumps(dict(zip(("t", "pid", "rss_kib", "fds", "threads"), smp))) + "\n")
    with open(os.path.join(D, "faults.jsonl"), "w") as f:
        for (st_, en, k, tg, note) in chaos.log:
            f.write(json.dumps({"start": st_, "end": en, "kind": k, "target": tg,
                                "note": note}) + "\n")

    # ---- Figures ----
    print("\nsoak figures:")
    print(f"  run: {duration:.0f} s of chaos, seed {A.seed}, {len(clients)} clients, drain "
          f"{drain_s:.0f} s; faults done: " +
          ", ".join(f"{k} {n}" for k, n in sorted(chaos.counts.items())) +
          ("; skipped: " + ", ".join(f"{k} {n}" for k, n in sorted(chaos.skipped.items()))
           if chaos.skipped else ""))
    restarts = {n: d.starts - 1 for n, d in DAEMONS.items() if d.starts > 1}
    print("  daemon restarts: " + (", ".join(f"{n} {k}" for n, k in restarts.items()) or "none")
          + f"; tracker start refused {DAEMONS['tracker'].failed_starts} time(s)")
    print(f"  jobs: {len(jobs)} ({sum(j.mode == 'watch' for j in jobs)} watched, "
          f"{sum(j.mode == 'poll' for j in jobs)} polled, "
          f"{sum(j.mode == 'cancel' for j in jobs)} to cancel); clients: " +
          ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items())))
    names = {0: "NO_ERROR", 1: "INSTANTIATION", 2: "COMPILE_HOST", 3: "COMPILE_DEVICE",
             4: "RUNTIME_DEVICE", 5: "WRONG_ANSWER", 6: "BUILD_TIMEOUT", 7: "RUN_TIMEOUT",
             8: "UNKNOWN"}
    print(f"  records: {total} (" + ", ".join(f"{names.get(k, k)} {v}"
                                              for k, v in sorted(errs.items())) + ")")
    if t_first is not None and t_last and t_last > t_first:
        rate_all = total / (t_last - t_first)
    else:
        rate_all = 0.0
    win = []
    for (t0, r0), (t1, r1) in zip(RECORDS, RECORDS[1:]):
        if t1 <= duration and t1 > t0:
            win.append((r1 - r0) / (t1 - t0))
    print(f"  dispatch: {rate_all:.2f} records/s from the first to the last record; per 6 s "
          f"sample during the chaos: median {pct(win, 0.5):.2f}, p10 {pct(win, 0.1):.2f}, "
          f"max {max(win) if win else 0:.2f}")
    # QueryBest from the prober, split by whether a fault touched the tracker's
    # reachability at that moment
    calls = []
    try:
        with open(probe_out) as f:
            for line in f:
                try:
                    calls.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    tr_faults = [(s, e) for (s, e, k, tg, _) in chaos.log
                 if (tg in ("tracker", "tc") and k in ("kill", "term", "stop", "link", "netem",
                                                      "throttle"))]

    def affected(t):
        rt = t - T0
        return any(s - 1 <= rt <= e + 2 for s, e in tr_faults)
    ok_lat = [c["lat"] for c in calls if c["ok"]]
    healthy = [c["lat"] for c in calls if c["ok"] and not affected(c["t"])]
    fails = {}
    for c in calls:
        if not c["ok"]:
            fails[c["code"]] = fails.get(c["code"], 0) + 1
    fails_healthy = sum(1 for c in calls if not c["ok"] and not affected(c["t"]))
    print(f"  QueryBest: {len(calls)} calls, {len(ok_lat)} answered: p50 "
          f"{pct(ok_lat, 0.5) * 1e3:.1f} ms, p99 {pct(ok_lat, 0.99) * 1e3:.1f} ms, max "
          f"{max(ok_lat, default=0) * 1e3:.0f} ms; outside tracker/client-link faults "
          f"{len(healthy)}: p50 {pct(healthy, 0.5) * 1e3:.1f} ms, p99 "
          f"{pct(healthy, 0.99) * 1e3:.1f} ms; failed "
          + (", ".join(f"{k} {v}" for k, v in sorted(fails.items())) or "none")
          + f" ({fails_healthy} outside those faults)")
    FINAL["qb"] = (pct(ok_lat, 0.5), pct(ok_lat, 0.99), pct(healthy, 0.5), pct(healthy, 0.99))
    for c in sorted(calls, key=lambda c: -c["lat"])[:3]:
        rt = c["t"] - T0
        on = [f"{k} {tg}" for (s, e, k, tg, _) in chaos.log if s - 1 <= rt <= e + 2]
        print(f"    slowest: {c['lat'] * 1e3:.0f} ms at {rt:.0f} s ({c['code']}); faults on: "
              + (", ".join(on) or "none"))
    for f in figs:
        print("  tracker " + f)
    if SAMPLES:
        print(f"  tracker samples: {len(SAMPLES)} over {len({s[1] for s in SAMPLES})} "
              f"process(es); max RSS {max(s[2] for s in SAMPLES) / 1024:.1f} MiB, fds "
              f"{max(s[3] for s in SAMPLES)}, threads {max(s[4] for s in SAMPLES)}")
    if OTHER_RSS:
        print("  other daemons' max RSS: " + ", ".join(f"{n} {v / 1024:.0f} MiB"
                                                        for n, v in sorted(OTHER_RSS.items())))
    cerr = [e for c in clients for e in c.errors]
    checks.append(("the clients saw no error but an unreachable tracker or a full store",
                   not cerr,
                   "none" if not cerr else "; ".join(cerr[:8])))
    print("\nchecks:")
    for name, ok, detail in checks:
        print(f"  {'PASS' if ok else 'FAIL'} {name}: {detail}")


if __name__ == "__main__":
    sys.exit(main())
