#!/usr/bin/python3
"""bench_transfer: what a store of other networks' records is worth to a new one.

Leave-one-out over the models given (make_zoo's builders, exported at opset 17
as bench_zoo does): for each model M, the store holds the records of every
other model, tuned from scratch, and none of M's own unless they share a
workload. Measured, per model:

  scratch     `ktune tune --no-transfer --trials B` on an empty store, once
              per seed (B = tasks x --trials-per-task): its final estimated
              latency E (the task scheduler's "Estimated total latency"), and
              the trials it took to first reach E (its curve is the table
              printed after every round). The first seed's store is the one
              the other models' leave-one-out stores are made of.
  tuned ms    `ktune run` on M's first-seed scratch store: the network tuned
              with the full budget.
  zero-shot   `ktune run --transfer` on the leave-one-out store: each task
              without a record of its own gets the best state of the nearest
              stored workloads re-fitted to it (checked against the reference
              first); its latency against the tuned one (goal: at most 1.25x)
              and against PyTorch's best mode (bench_zoo's four modes).
  transfer    `ktune tune --more B` on a copy of the leave-one-out store with
              the same seed (transfer on, and the store's cost model where the
              tracker has one): the trials it takes to reach the scratch run's
              E of the same seed, against the trials the scratch run took.
              Trials are the job's own measurements (records the job added),
              not records the store already held. Goal: at most a quarter.

The ratios are medians over the seeds. Figures are printed, never asserted; at
the end one Markdown table for docs/benchmarks.md. Everything lives under --dir
(a temporary directory, removed at the end unless --keep or --dir).

usage: /usr/bin/python3 bench/bench_transfer.py [--models a,b,...] [--trials-per-task N]
           [--seeds N] [--image-size S] [--per-round N] [--threads T] [--repeat R] [--dir DIR] [--keep]
           [--ktune PATH]
"""
import argparse
import importlib.util
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import traceback

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_bench_zoo():
    """bench/bench_zoo.py as a module: its model export, PyTorch timing and ktune runner."""
    spec = importlib.util.spec_from_file_location("bench_zoo", os.path.join(ROOT, "bench",
                                                                            "bench_zoo.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bz = load_bench_zoo()
say, short, failure = bz.say, bz.short, bz.failure

CURVE_RE = re.compile(r"Estimated total latency: ([0-9.]+) ms\s+Trials: (\d+)")


def parse_curve(out):
    """[(trials, estimated ms)] from the tables `ktune tune` prints after each round."""
    return [(int(m.group(2)), float(m.group(1))) for m in CURVE_RE.finditer(out)]


def reach(curve, target, offset=0):
    """The job's own trials at the first point of curve at or below target
    (None: never); offset is what the store held before the job."""
    for trials, est in curve:
        if est <= target * (1 + 1e-9):
            return trials - offset
    return None


def count_records(ktune, db, log, cwd):
    rc, out, _ = ktune(["records", "count", "--db", db], log, cwd)
    if rc != 0:
        raise RuntimeError(failure("records count", rc, out))
    m = re.search(r"(\d+)", out)
    if not m:
        raise RuntimeError(f"records count printed no number: {short(out)}")
    return int(m.group(1))


class Model:
    """One model's files and figures."""

    def __init__(self, name, d):
        self.name, self.dir = name, d
        self.onnx = os.path.join(d, f"{name}.onnx")
        self.x = os.path.join(d, "x.npy")
        self.notes = []
        self.scratch = {}      # seed -> {"db", "curve", "final", "reach"}
        self.transfer = {}     # seed -> {"curve", "offset", "reach"}
        self.tasks = None
        self.ref = None


def tune(ktune, m, db, seed, args, tag, env):
    """`ktune tune` of model m into db; (curve, job's own trials, seconds)."""
    before = count_records(ktune, db, os.path.join(m.dir, f"count_{tag}.log"), m.dir) \
        if os.path.exists(db) else 0
    rc, out, dt = ktune(["tune", "--onnx", m.onnx, "--db", db, "--seed", str(seed)] + args,
                        os.path.join(m.dir, f"tune_{tag}.log"), m.dir, env=env, timeout=None)
    if rc != 0:
        raise RuntimeError(failure(f"tune ({tag})", rc, out))
    curve = parse_curve(out)
    if not curve:
        raise RuntimeError(f"tune ({tag}) printed no task scheduler table")
    after = count_records(ktune, db, os.path.join(m.dir, f"count_{tag}.log"), m.dir)
    # The curve counts every trial of these tasks, stored ones too: the job's
    # own are the records it added.
    offset = curve[-1][0] - (after - before)
    return curve, offset, dt


def run(ktune, m, db, extra, tag, a, env):
    """`ktune run` of m on db; (ms, max rel. error against PyTorch, output)."""
    y = os.path.join(m.dir, f"y_{tag}.npy")
    rc, out, _ = ktune(["run", "--onnx", m.onnx, "--db", db, "--input", m.x, "--output", y,
                        "--repeat", str(a.repeat), "--threads", str(a.threads)] + extra,
                       os.path.join(m.dir, f"run_{tag}.log"), m.dir, env=env)
    if rc != 0:
        raise RuntimeError(failure(f"run ({tag})", rc, out))
    r = bz.parse_run(out)
    return r["ms"], bz.rel_err(np.load(y), m.ref), out


def merge_store(ktune, sources, dst, d):
    """dst: a new store holding every record of the sources (export, import)."""
    if os.path.exists(dst):
        os.remove(dst)
    for i, src in enumerate(sources):
        jl = os.path.join(d, f"merge_{i}.jsonl")
        rc, out, _ = ktune(["records", "export", "--db", src, "--out", jl],
                           os.path.join(d, "merge_export.log"), d)
        if rc != 0:
            raise RuntimeError(failure("records export", rc, out))
        rc, out, _ = ktune(["records", "import", "--db", dst, "--in", jl],
                           os.path.join(d, "merge_import.log"), d)
        if rc != 0:
            raise RuntimeError(failure("records import", rc, out))
        os.remove(jl)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def cell(v, fmt):
    return "-" if v is None else fmt.format(v)


def main():
    ap = argparse.ArgumentParser(description="leave-one-out schedule transfer (see the "
                                             "docstring at the top of this file)")
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,encoder")
    ap.add_argument("--trials-per-task", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 of each tuning run")
    ap.add_argument("--image-size", type=int, default=224, help="the CNNs' input size")
    ap.add_argument("--per-round", type=int, default=None,
                    help="measurements per round of every tuning run (ktune tune's default "
                         "otherwise); fewer give the trials column a finer step, since the "
                         "curve has one point per round")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=10, help="timed runs of each latency")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    ap.add_argument("--ktune", default=os.path.join(ROOT, "build", "cli", "ktune"))
    a = ap.parse_args()
    names = [n for n in a.models.split(",") if n]
    if len(names) < 2:
        ap.error("leave-one-out needs at least two models")
    if a.seeds < 1 or a.trials_per_task < 1 or (a.per_round is not None and a.per_round < 1):
        ap.error("--seeds, --trials-per-task and --per-round must be positive")
    per_round = ["--per-round", str(a.per_round)] if a.per_round else []
    bz.IMAGE_SIZE = a.image_size
    own_dir = a.dir is None
    a.dir = os.path.abspath(a.dir or tempfile.mkdtemp(prefix="bench_transfer."))
    os.makedirs(a.dir, exist_ok=True)
    ktune = bz.Ktune(a.ktune)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    t_start = time.time()
    try:
        bz.machine(ktune)
        say(f"# bench_transfer: models {','.join(names)}; {a.trials_per_task} trials per task; "
            f"seeds 0..{a.seeds - 1}; CNN input {a.image_size}x{a.image_size}; "
            f"{a.threads} thread(s); dir {a.dir}")
        zoo = bz.load_zoo()
        models = []
        for n in names:
            m = Model(n, os.path.join(a.dir, n))
            os.makedirs(m.dir, exist_ok=True)
            models.append(m)
            try:
                model, x, note = bz.build_model(zoo, n, False)
                with torch.no_grad():
                    m.ref = model(x).float().numpy()
                bz.export(model, x, m.onnx)
                np.save(m.x, x.numpy())
                rc, out, _ = ktune(["tasks", "--onnx", m.onnx], os.path.join(m.dir, "tasks.log"),
                                   m.dir)
                if rc != 0:
                    raise RuntimeError(failure("tasks", rc, out))
                m.tasks, _ = bz.parse_tasks(out)
                torch.set_num_threads(a.threads)
                t = bz.time_torch(bz.torch_modes(model, x), m.ref, a.repeat)
                best = [(ms, mode) for mode, (ms, _) in t.items() if ms is not None]
                m.torch_ms, m.torch_mode = min(best) if best else (None, None)
                say(f"\n## {n}: {note}, {m.tasks} tasks; PyTorch's best "
                    f"{cell(m.torch_ms, '{:.3f}')} ms ({m.torch_mode})")
            except Exception as e:
                traceback.print_exc()
                m.notes.append("export: " + short(e))
                say(f"  FAILED: {m.notes[-1]}")

        ok = [m for m in models if not m.notes]
        # 1. From scratch, every seed.
        for m in ok:
            budget = m.tasks * a.trials_per_task
            for seed in range(a.seeds):
                db = os.path.join(m.dir, f"scratch{seed}.db")
                try:
                    if os.path.exists(db):
                        os.remove(db)
                    curve, _, dt = tune(ktune, m, db, seed, ["--trials", str(budget),
                                                             "--no-transfer"] + per_round,
                                        f"scratch{seed}", env)
                    final = curve[-1][1]
                    m.scratch[seed] = {"db": db, "curve": curve, "final": final,
                                       "reach": reach(curve, final), "s": dt}
                    say(f"  {m.name} scratch seed {seed}: {budget} trials in {dt:.0f} s, "
                        f"estimate {final:.3f} ms, reached at {m.scratch[seed]['reach']} trials")
                except Exception as e:
                    m.notes.append(f"scratch seed {seed}: " + short(e))
                    say(f"  FAILED: {m.notes[-1]}")

        # 2. Leave one out: zero-shot and transfer tuning.
        for m in ok:
            if 0 not in m.scratch:
                continue
            budget = m.tasks * a.trials_per_task
            others = [o.scratch[0]["db"] for o in ok if o is not m and 0 in o.scratch]
            loo = os.path.join(m.dir, "others.db")
            try:
                m.tuned_ms, m.tuned_err, _ = run(ktune, m, m.scratch[0]["db"], [], "tuned", a, env)
                merge_store(ktune, others, loo, m.dir)
                m.zero_ms, m.zero_err, out = run(ktune, m, loo, ["--transfer"], "zero", a, env)
                # Per task, `ktune run --transfer` says where its kernel came from.
                lines = [l for l in out.splitlines() if re.match(r"task \d+ \(", l)]
                m.zero_from = {"re-fitted": sum("re-fitted from" in l for l in lines),
                               "own record": sum("its own record" in l for l in lines),
                               "store model": sum("chosen by the store model" in l
                                                  for l in lines),
                               "default": sum("nothing stored to re-fit" in l and
                                              "chosen by" not in l for l in lines)}
                say(f"  {m.name}: tuned {m.tuned_ms:.3f} ms (err {m.tuned_err:.2g}), zero-shot "
                    f"{m.zero_ms:.3f} ms (err {m.zero_err:.2g}; tasks: "
                    + ", ".join(f"{v} {k}" for k, v in m.zero_from.items())
                    + f") = {m.zero_ms / m.tuned_ms:.3f}x tuned")
            except Exception as e:
                m.notes.append(short(e))
                say(f"  FAILED: {m.notes[-1]}")
                continue
            for seed in m.scratch:
                db = os.path.join(m.dir, f"transfer{seed}.db")
                try:
                    shutil.copyfile(loo, db)
                    curve, offset, dt = tune(ktune, m, db, seed,
                                             ["--more", str(budget)] + per_round,
                                             f"transfer{seed}", env)
                    r = reach(curve, m.scratch[seed]["final"], offset)
                    m.transfer[seed] = {"curve": curve, "offset": offset, "reach": r, "s": dt}
                    say(f"  {m.name} transfer seed {seed}: first estimate "
                        f"{curve[0][1]:.3f} ms at {curve[0][0] - offset} trials, reached "
                        f"scratch's {m.scratch[seed]['final']:.3f} ms at "
                        f"{r if r is not None else f'>{budget}'} trials ({dt:.0f} s)")
                except Exception as e:
                    m.notes.append(f"transfer seed {seed}: " + short(e))
                    say(f"  FAILED: {m.notes[-1]}")

        say("\n| model | tasks | budget | scratch estimate ms | tuned ms | zero-shot ms "
            "| zero-shot / tuned | best torch ms (mode) | zero-shot / torch | trials to the "
            "scratch estimate: scratch | with transfer | ratio | first-round estimate: "
            "scratch / transfer | notes |")
        say("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: "
            "| ---: | --- |")
        for m in models:
            g = lambda k: getattr(m, k, None)  # noqa: E731
            budget = m.tasks * a.trials_per_task if m.tasks else None
            sc = med([v["reach"] for v in m.scratch.values()])
            tr = med([v["reach"] if v["reach"] is not None else float("inf")
                      for v in m.transfer.values()]) if m.transfer else None
            ratio = med([m.transfer[s]["reach"] / m.scratch[s]["reach"]
                         if m.transfer[s]["reach"] is not None else float("inf")
                         for s in m.transfer if m.scratch[s]["reach"]]) if m.transfer else None
            f0s = med([v["curve"][0][1] for v in m.scratch.values()])
            f0t = med([v["curve"][0][1] for v in m.transfer.values()])
            zt = g("zero_ms") / g("tuned_ms") if g("zero_ms") and g("tuned_ms") else None
            zp = g("zero_ms") / g("torch_ms") if g("zero_ms") and g("torch_ms") else None
            torch_cell = "-" if g("torch_ms") is None else f"{m.torch_ms:.3f} ({m.torch_mode})"
            say(f"| {m.name} | {cell(m.tasks, '{}')} | {cell(budget, '{}')} "
                f"| {cell(med([v['final'] for v in m.scratch.values()]), '{:.3f}')} "
                f"| {cell(g('tuned_ms'), '{:.3f}')} | {cell(g('zero_ms'), '{:.3f}')} "
                f"| {cell(zt, '**{:.3f}x**')} | {torch_cell} | {cell(zp, '{:.3f}x')} "
                f"| {cell(sc, '{:.0f}')} | {cell(tr, '{:.0f}')} | {cell(ratio, '**{:.2f}**')} "
                f"| {cell(f0s, '{:.3f}')} / {cell(f0t, '{:.3f}')} "
                f"| {'; '.join(m.notes).replace('|', chr(92) + '|')} |")
        say(f"\n{len(models)} model(s) in {time.time() - t_start:.0f} s "
            f"({time.strftime('%Y-%m-%d %H:%M', time.gmtime(t_start))}-"
            f"{time.strftime('%H:%M UTC', time.gmtime())})")
    finally:
        if own_dir and not a.keep:
            shutil.rmtree(a.dir, ignore_errors=True)
        else:
            say(f"kept {a.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
