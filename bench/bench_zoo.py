#!/usr/bin/python3
"""bench_zoo: the model zoo end to end, ktune against PyTorch on this machine.

What it measures, per model, and why:

  import      `ktune tasks --onnx M.onnx`, run once and timed: how long the
              ONNX importer and task extraction take, how many tuning tasks
              the model has (the `========== Task` lines) and how many layers
              run as plain steps (the `plain step ... xN: ...` lines, N
              summed): layers that no task covers run ktune's reference
              implementation and are not tuned, so a large count means time
              the tuner cannot win back.
  untuned err ktune runs the model on an empty store (every task on its
              default schedule) and its output is compared with PyTorch's
              (max|diff| / max|ref|): the importer's correctness, apart from
              any tuning.
  tuning      `ktune tune --trials (tasks * N)` into a store (N per task,
              OMP_NUM_THREADS=T), timed: what a tuned model costs to get.
              Skipped with --skip-tune (then the store is used as it is).
  ktune ms    `ktune run --db STORE --repeat R --threads T`: the median of its
              `latency:` line; beside it the ratio of the tuned steps' time in
              the network to the sum of their records' costs (`tuned steps:
              ... (Cx)`): how far the tuner's estimate holds in the network.
  torch ms    PyTorch on T threads (torch.set_num_threads) in the same run:
              eager NCHW, eager channels-last, torch.jit.freeze of
              torch.jit.script (or trace where script fails) and
              torch.jit.optimize_for_inference, each the median of R runs
              after warm-up; timed before the tuning and again after ktune's
              run (the host's load drifts); the best of all is the baseline.
  ratio       ktune ms / PyTorch's best ms, the headline (< 1: ktune faster).
  between     the time of the steps without a task (`steps without a task:`
  kernels ms  in ktune run): layout conversions, data movement and plain
              steps, which no record's cost counts.

The models are tests/zoo/make_zoo.py's builders (torchvision architectures and
torch.nn transformers, random weights, non-trivial batch-norm statistics; no
pretrained weights: ktune only has to compute what PyTorch computes), exported
by torch.onnx.export at opset 17. The CNNs are run at their realistic size,
a 1x3x224x224 input (make_zoo keeps them at 64x64 so its checks are fast);
their classifiers keep make_zoo's 10 classes, which costs nothing against
the convolutions. `vit` is make_zoo's small ViT (32x32), or torchvision's
vit_b_16 at 224x224 with --full; the transformers keep make_zoo's shapes.

The machine's multiply-add ceiling is printed first (build/bench/fma_peak,
where that binary is built) with the CPU's model name, and at the end one
Markdown table (one row per model) to paste into docs/benchmarks.md, with a
second one of every PyTorch mode's time. Figures are printed, never asserted.
A model that fails to build, export, import or run has the error in its row
and the bench goes on with the next. Everything is written under --dir
(default: a fresh temporary directory, removed at the end unless --keep).

usage: /usr/bin/python3 bench/bench_zoo.py [--models a,b,...] [--trials-per-task N]
           [--threads T] [--dir DIR] [--db STORE] [--repeat R] [--skip-tune]
           [--full] [--keep] [--ktune PATH]
"""
import argparse
import copy
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np
import torch
import torchvision.models as tvm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODELS = ["resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "densenet121",
                  "convnext_tiny", "vit", "encoder"]
OPSET = 17
IMAGE_SIZE = 224
# Models whose input size is part of the architecture: kept at make_zoo's size.
FIXED_SIZE = {"vit", "swin", "maxvit"}
# Untimed runs before each PyTorch mode's R timed ones: at least WARMUP runs
# and WARMUP_S seconds (TorchScript's profiling executor optimises a graph
# only after its first runs), at most WARMUP_MAX runs.
WARMUP, WARMUP_S, WARMUP_MAX = 5, 0.5, 100
RUN_TIMEOUT_S = 3 * 3600   # ktune tasks / run; ktune tune has no limit
START_RETRIES = 5          # the CLI may be mid-rebuild: retry a failed start ...
START_RETRY_S = 60         # ... after a minute


def say(*a):
    print(*a, flush=True)


def short(e, n=160):
    """One line of an exception or message, for a table cell."""
    if isinstance(e, BaseException):
        text = (str(e).strip().splitlines() or [""])[0]
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    else:
        text = " ".join(str(e).split())
    return text if len(text) <= n else text[:n - 3] + "..."


# ---- the models -----------------------------------------------------------------------------

def load_zoo():
    """tests/zoo/make_zoo.py as a module (it is not a package)."""
    path = os.path.join(ROOT, "tests", "zoo", "make_zoo.py")
    spec = importlib.util.spec_from_file_location("make_zoo", path)
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    return zoo


def build_model(zoo, name, full):
    """(model in eval mode, example input, a note on its size)."""
    torch.manual_seed(0)
    if name == "vit" and full:
        model = tvm.vit_b_16(num_classes=zoo.NUM_CLASSES)
        # torchvision zero-initialises the classifier (see make_zoo's build_vit).
        model.heads.head.reset_parameters()
        x = torch.randn(1, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(1))
    else:
        if name not in zoo.MODELS:
            raise KeyError(f"no model {name!r} in make_zoo (its --list)")
        model, x = zoo.MODELS[name]()
        if x.dim() == 4 and name not in FIXED_SIZE:
            # A CNN: the same model at the realistic size (adaptive pooling
            # makes it input-size independent), input drawn as make_zoo does.
            x = torch.randn(1, 3, IMAGE_SIZE, IMAGE_SIZE,
                            generator=torch.Generator().manual_seed(1))
    zoo.randomize_batch_norms(model)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    return model, x, f"input {'x'.join(map(str, x.shape))} {str(x.dtype).replace('torch.', '')}, " \
                     f"{params / 1e6:.2f}M parameters"


def export(model, x, path):
    # Exported with autograd on, as make_zoo does: under no_grad,
    # nn.TransformerEncoderLayer takes a fused fast path the exporter cannot
    # translate. The traced computation is the same.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, x, path, opset_version=OPSET, do_constant_folding=True,
                          input_names=["x"], output_names=["y"])


def rel_err(y, ref):
    """max|y - ref| / max|ref|."""
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    if y.shape != ref.shape:
        if y.size != ref.size:
            raise ValueError(f"output shape {y.shape}, PyTorch's {ref.shape}")
        y = y.reshape(ref.shape)
    return float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))


# ---- PyTorch's side --------------------------------------------------------------------------

def torch_modes(model, x):
    """[(mode, callable or None, why not)], each callable running one inference."""
    modes = []
    modes.append(("eager", lambda: model(x), None))

    try:
        if x.dim() != 4:
            raise ValueError("the input is not 4-D")
        cl = copy.deepcopy(model).to(memory_format=torch.channels_last)
        xcl = x.contiguous(memory_format=torch.channels_last)
        modes.append(("channels_last", lambda: cl(xcl), None))
    except Exception as e:
        modes.append(("channels_last", None, short(e)))

    def script_or_trace():
        """A fresh TorchScript module of the model: scripted, else traced
        (also where the scripted module returns no tensor: GoogLeNet's and
        Inception's script signatures return their named outputs)."""
        m = copy.deepcopy(model)
        try:
            sm = torch.jit.script(m).eval()
            with torch.no_grad():
                if not isinstance(sm(x), torch.Tensor):
                    raise TypeError("the scripted module returns no tensor")
            return sm, "script"
        except Exception:
            with torch.no_grad():
                return torch.jit.trace(m, x, check_trace=False).eval(), "trace"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sm, how = script_or_trace()
            frozen = torch.jit.freeze(sm)
            modes.append((f"jit.freeze({how})", lambda: frozen(x), None))
        except Exception as e:
            modes.append(("jit.freeze", None, short(e)))
        try:
            sm, how = script_or_trace()
            opt = torch.jit.optimize_for_inference(sm)
            modes.append((f"optimize_for_inference({how})", lambda: opt(x), None))
        except Exception as e:
            modes.append(("optimize_for_inference", None, short(e)))
    return modes


def time_torch(modes, ref, repeat):
    """{mode: (median ms, None) or (None, why)}; a mode whose output is not
    PyTorch's eager output (relative error above 1e-3) is not counted."""
    res = {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mode, fn, why in modes:
            if fn is None:
                res[mode] = (None, why)
                continue
            try:
                t0, runs = time.perf_counter(), 1
                y = fn()
                while runs < WARMUP_MAX and (runs < WARMUP
                                             or time.perf_counter() - t0 < WARMUP_S):
                    fn()
                    runs += 1
                err = rel_err(y.float().numpy(), ref)
                if not err <= 1e-3:
                    raise ValueError(f"its output differs from eager's by {err:.2g}")
                t = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    fn()
                    t.append(time.perf_counter() - t0)
                res[mode] = (statistics.median(t) * 1e3, None)
            except Exception as e:
                res[mode] = (None, short(e))
    return res


def show_torch(label, res):
    cells = [f"{m} {ms:.3f} ms" if ms is not None else f"{m} n/a ({why})"
             for m, (ms, why) in res.items()]
    say(f"  torch {label}: " + "; ".join(cells))


# ---- ktune's side -----------------------------------------------------------------------------

class Ktune:
    def __init__(self, path):
        self.path = path

    def __call__(self, args, log, cwd, env=None, timeout=RUN_TIMEOUT_S):
        """Run ktune ARGS in cwd with its output (stdout and stderr) in the
        file log; (exit status, output, wall seconds). A start that fails
        (the binary or its library being rebuilt) is retried a few times."""
        for attempt in range(START_RETRIES + 1):
            t0 = time.perf_counter()
            try:
                with open(log, "w") as f:
                    p = subprocess.run([self.path] + args, stdout=f, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                                       timeout=timeout)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc = 124
            except OSError as e:
                rc, out = 127, f"cannot start {self.path}: {e}"
                with open(log, "w") as f:
                    f.write(out + "\n")
            dt = time.perf_counter() - t0
            with open(log, errors="replace") as f:
                out = f.read()
            if rc == 124:
                out += f"\n(timed out after {timeout} s)"
            started = not (rc == 127 or "error while loading shared libraries" in out)
            if started or attempt == START_RETRIES:
                return rc, out, dt
            say(f"  (ktune did not start: {short(out)}; retrying in {START_RETRY_S} s)")
            time.sleep(START_RETRY_S)


def failure(what, rc, out):
    """The message of a failed ktune command: its last non-empty lines."""
    lines = [l for l in out.splitlines() if l.strip()]
    return f"{what} exit {rc}: " + short(" / ".join(lines[-2:]) if lines else "no output")


def parse_tasks(out):
    """(tasks, layers run as plain steps) from `ktune tasks`' listing."""
    tasks = sum(1 for l in out.splitlines() if l.startswith("========== Task"))
    plain = 0
    for l in out.splitlines():
        if l.startswith("plain step"):
            m = re.search(r" x(\d+):", l)
            plain += int(m.group(1)) if m else 1
    return tasks, plain


def parse_run(out):
    """{'ms', 'here', 'est', 'net'} from `ktune run`'s last lines (None where absent)."""
    r = {"ms": None, "here": None, "est": None, "net": None, "between": None}
    for l in out.splitlines():
        m = re.match(r"latency: ([0-9.]+) ms", l)
        if m:
            r["ms"] = float(m.group(1))
        m = re.match(r"tuned steps: \d+, ([0-9.]+) ms here against ([0-9.]+) ms .*\(([0-9.]+)x\)", l)
        if m:
            r["here"], r["est"], r["net"] = map(float, m.groups())
        m = re.match(r"steps without a task: \d+, ([0-9.]+) ms", l)
        if m:
            r["between"] = float(m.group(1))
    return r


# ---- the bench ---------------------------------------------------------------------------------

def machine(ktune):
    say("# bench_zoo")
    peak = os.path.join(ROOT, "build", "bench", "fma_peak")
    if os.path.isfile(peak) and os.access(peak, os.X_OK):
        p = subprocess.run([peak], capture_output=True, text=True)
        say("FMA ceiling (build/bench/fma_peak): " + (p.stdout + p.stderr).strip())
    else:
        have = sorted(os.listdir(os.path.dirname(peak))) if os.path.isdir(os.path.dirname(peak)) else []
        lib = [f for f in have if "fma_peak" in f]
        say("FMA ceiling: skipped, build/bench/fma_peak is not built"
            + (f" (build/bench has only {', '.join(lib)}, linked into bench_search and "
               "bench_network, which print the ceiling themselves)" if lib else ""))
    p = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True)
    say("CPU: " + (" ".join(p.stdout.split()[2:]) or "unknown") + f", {os.cpu_count()} CPUs")
    try:
        rev = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %cd",
                              "--date=format:%Y-%m-%d %H:%M"], capture_output=True,
                             text=True).stdout.strip()
    except OSError:
        rev = "?"
    say(f"commit {rev}; torch {torch.__version__}; ktune {ktune.path}")


def bench_model(name, a, zoo, ktune, empty_db):
    """Everything for one model; the row of the table (a dict)."""
    row = {"model": name, "notes": []}
    d = os.path.join(a.dir, name)
    os.makedirs(d, exist_ok=True)
    onnx_path, x_path = os.path.join(d, f"{name}.onnx"), os.path.join(d, "x.npy")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    say(f"\n## {name}")

    # PyTorch: build, reference output, export.
    try:
        t0 = time.perf_counter()
        model, x, note = build_model(zoo, name, a.full)
        with torch.no_grad():
            ref = model(x).float().numpy()
        export(model, x, onnx_path)
        np.save(x_path, x.numpy())
        say(f"  export: {note}, opset {OPSET}, {time.perf_counter() - t0:.1f} s ({onnx_path})")
    except Exception as e:
        traceback.print_exc()
        row["notes"].append("export: " + short(e))
        say(f"  FAILED: export: {short(e)}")
        return row

    # Import: ktune tasks, once, timed.
    rc, out, dt = ktune(["tasks", "--onnx", onnx_path], os.path.join(d, "tasks.log"), d)
    if rc != 0:
        row["notes"].append(failure("tasks", rc, out))
        say(f"  FAILED: {row['notes'][-1]}")
        return row
    row["tasks"], row["plain"] = parse_tasks(out)
    row["import_s"] = dt
    say(f"  import: {dt:.2f} s, {row['tasks']} tasks, {row['plain']} layers as plain steps")

    # Untuned: every task on its default schedule, output against PyTorch's.
    y0 = os.path.join(d, "y_untuned.npy")
    rc, out, dt = ktune(["run", "--onnx", onnx_path, "--db", empty_db, "--input", x_path,
                         "--output", y0, "--repeat", "1"], os.path.join(d, "run_untuned.log"), d,
                        env=env)
    if rc != 0:
        row["notes"].append(failure("untuned run", rc, out))
        say(f"  FAILED: {row['notes'][-1]}")
    else:
        try:
            row["untuned_err"] = rel_err(np.load(y0), ref)
            say(f"  untuned: max|diff|/max|ref| {row['untuned_err']:.2g} against PyTorch "
                f"(build and one run on an empty store, {dt:.1f} s)")
        except Exception as e:
            row["notes"].append("untuned output: " + short(e))
            say(f"  FAILED: untuned output: {short(e)}")

    # PyTorch, first pass (before the tuning loads the machine).
    torch.set_num_threads(a.threads)
    modes = torch_modes(model, x)
    before = time_torch(modes, ref, a.repeat)
    show_torch("before", before)

    # Tuning.
    if not a.skip_tune:
        trials = row["tasks"] * a.trials_per_task
        row["trials"] = trials
        say(f"  tune: {trials} trials ({row['tasks']} tasks x {a.trials_per_task}), "
            f"OMP_NUM_THREADS={a.threads}, store {a.db} ...")
        rc, out, dt = ktune(["tune", "--onnx", onnx_path, "--trials", str(trials), "--db", a.db],
                            os.path.join(d, "tune.log"), d, env=env, timeout=None)
        row["tune_s"] = dt
        if rc != 0:
            row["notes"].append(failure("tune", rc, out))
            say(f"  FAILED: {row['notes'][-1]}")
        else:
            last = [l for l in out.splitlines() if l.startswith("Job ")]
            say(f"  tune: {dt:.0f} s" + (f" ({last[-1].strip()})" if last else ""))

    # ktune's latency from the store.
    y1 = os.path.join(d, "y_tuned.npy")
    rc, out, dt = ktune(["run", "--onnx", onnx_path, "--db", a.db, "--input", x_path,
                         "--output", y1, "--repeat", str(a.repeat), "--threads", str(a.threads)],
                        os.path.join(d, "run.log"), d, env=env)
    if rc != 0:
        row["notes"].append(failure("run", rc, out))
        say(f"  FAILED: {row['notes'][-1]}")
    else:
        # The per-layer table and the summary lines, not the per-task notes.
        for l in out.splitlines():
            if not re.match(r"task \d+ \(", l):
                say("    " + l)
        r = parse_run(out)
        row["ktune_ms"], row["net"], row["between"] = r["ms"], r["net"], r["between"]
        try:
            err = rel_err(np.load(y1), ref)
            say(f"  tuned: max|diff|/max|ref| {err:.2g} against PyTorch")
            if not err <= 1e-3:
                row["notes"].append(f"tuned output off by {err:.2g}")
        except Exception as e:
            row["notes"].append("tuned output: " + short(e))

    # PyTorch again, after ktune's run; the best of everything is the baseline.
    after = time_torch(modes, ref, a.repeat)
    show_torch("after", after)
    row["torch"] = {}
    for mode in before:
        ts = [v[0] for v in (before[mode], after[mode]) if v[0] is not None]
        row["torch"][mode] = min(ts) if ts else None
        if not ts and "not 4-D" not in before[mode][1]:
            row["notes"].append(f"torch {mode} n/a: {before[mode][1]}")
    best = [(ms, m) for m, ms in row["torch"].items() if ms is not None]
    if best:
        row["torch_ms"], row["torch_mode"] = min(best)
    if row.get("ktune_ms") and row.get("torch_ms"):
        row["ratio"] = row["ktune_ms"] / row["torch_ms"]
        say(f"  ==> {name}: ktune {row['ktune_ms']:.3f} ms / PyTorch {row['torch_ms']:.3f} ms "
            f"({row['torch_mode']}) = {row['ratio']:.3f}x")
    return row


def cell(v, fmt):
    return "-" if v is None else fmt.format(v)


def table(rows):
    say("\n| model | tasks | plain steps | import s | untuned err | tuning s | trials | ktune ms "
        "| best torch ms (mode) | ratio | net/estimate | between kernels ms | notes |")
    say("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |")
    for r in rows:
        g = r.get
        torch_cell = "-" if g("torch_ms") is None else f"{r['torch_ms']:.3f} ({r['torch_mode']})"
        notes = "; ".join(r["notes"]).replace("|", "\\|")
        say(f"| {r['model']} | {cell(g('tasks'), '{}')} | {cell(g('plain'), '{}')} "
            f"| {cell(g('import_s'), '{:.2f}')} | {cell(g('untuned_err'), '{:.2g}')} "
            f"| {cell(g('tune_s'), '{:.0f}')} | {cell(g('trials'), '{}')} "
            f"| {cell(g('ktune_ms'), '{:.3f}')} | {torch_cell} | {cell(g('ratio'), '**{:.3f}x**')} "
            f"| {cell(g('net'), '{:.2f}x')} | {cell(g('between'), '{:.3f}')} | {notes} |")

    # Every PyTorch mode, the faster of its two passes.
    modes = []
    for r in rows:
        for m in r.get("torch", {}):
            base = m.split("(")[0]
            if base not in modes:
                modes.append(base)
    if modes:
        say("\nPyTorch per mode (ms, the faster of the passes before and after ktune):\n")
        say("| model | " + " | ".join(modes) + " |")
        say("| --- |" + " ---: |" * len(modes))
        for r in rows:
            if not r.get("torch"):
                continue
            byb = {m.split("(")[0]: (m, ms) for m, ms in r.get("torch", {}).items()}
            cells = []
            for b in modes:
                m, ms = byb.get(b, (b, None))
                how = m[len(b):]
                cells.append("n/a" if ms is None else f"{ms:.3f}{' ' + how if how else ''}")
            say(f"| {r['model']} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description="ktune against PyTorch on the model zoo "
                                             "(see the docstring at the top of this file)")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS),
                    help="comma-separated make_zoo names (default: %(default)s)")
    ap.add_argument("--trials-per-task", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="ktune's and PyTorch's threads")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed at the end)")
    ap.add_argument("--db", help="the tuning store (default: DIR/ktune.db)")
    ap.add_argument("--repeat", type=int, default=30, help="timed runs of each latency")
    ap.add_argument("--skip-tune", action="store_true", help="run from the store as it is")
    ap.add_argument("--full", action="store_true", help="vit: torchvision's vit_b_16 at 224x224")
    ap.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    ap.add_argument("--ktune", default=os.path.join(ROOT, "build", "cli", "ktune"))
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]

    own_dir = a.dir is None
    a.dir = os.path.abspath(a.dir or tempfile.mkdtemp(prefix="bench_zoo."))
    os.makedirs(a.dir, exist_ok=True)
    a.db = os.path.abspath(a.db or os.path.join(a.dir, "ktune.db"))
    ktune = Ktune(a.ktune)
    t_start = time.time()
    try:
        machine(ktune)
        say(f"models {','.join(models)}; {a.trials_per_task} trials per task"
            f"{' (not tuned: --skip-tune)' if a.skip_tune else ''}; {a.threads} thread(s); "
            f"repeat {a.repeat}; dir {a.dir}; store {a.db}")
        if a.skip_tune and not os.path.exists(a.db):
            say(f"warning: --skip-tune and no store at {a.db}")
        zoo = load_zoo()
        empty_db = os.path.join(a.dir, "empty.db")
        if not os.path.exists(empty_db):
            rc, out, _ = ktune(["records", "import", "--db", empty_db, "--in", os.devnull],
                               os.path.join(a.dir, "empty.log"), a.dir)
            if rc != 0:
                say("warning: " + failure("records import", rc, out))
        rows = []
        for name in models:
            try:
                rows.append(bench_model(name, a, zoo, ktune, empty_db))
            except Exception as e:  # whatever breaks, the next model still runs
                traceback.print_exc()
                rows.append({"model": name, "notes": ["bench: " + short(e)]})
        table(rows)
        say(f"\n{len(rows)} model(s) in {time.time() - t_start:.0f} s "
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
