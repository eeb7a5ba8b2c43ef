"""What the client asks of the `ktune` program: a network's tuning tasks
(`ktune tasks --json`, the partitioner is C code) and a workload's key. The
program is $KTUNE_CLI, else `ktune` on PATH."""
import json
import os
import shutil
import subprocess

from ._errors import KtuneError


def executable(path=None):
    """The ktune program to run: path, $KTUNE_CLI, or `ktune` on PATH."""
    found = path or os.environ.get("KTUNE_CLI") or shutil.which("ktune")
    if not found:
        raise KtuneError(None, "cannot find the ktune program: put it on PATH or set KTUNE_CLI")
    return found


def run(args, cli=None):
    """Run `ktune ARGS...` and return its standard output; KtuneError with its
    message when it fails."""
    prog = executable(cli)
    try:
        p = subprocess.run([prog] + args, capture_output=True, text=True, check=False)
    except OSError as e:
        raise KtuneError(None, "cannot run %s: %s" % (prog, e)) from None
    if p.returncode != 0:
        raise KtuneError(None, p.stderr.strip() or "ktune %s: exit status %d"
                         % (args[0], p.returncode))
    return p.stdout


def _dims(shape):
    return shape if isinstance(shape, str) else "x".join(str(int(d)) for d in shape)


def network_tasks(network=None, network_file=None, onnx=None, layout=None, batch=None,
                  seq_len=None, inputs=None, winograd=None, cli=None):
    """A network's tuning tasks as `ktune tasks --json` lists them:
    [{"workload": {...}, "weight": W, "key": "...", "desc": "..."}, ...].

    One of network (a built-in name), network_file (a JSON network) or onnx
    (a model file); inputs maps an ONNX input's name to its shape
    ((1, 3, 224, 224) or "1x3x224x224"); winograd True/False adds or leaves
    out the Winograd tasks (None: ktune's default, on for NHWC)."""
    given = [(o, v) for o, v in (("--network", network), ("--network-file", network_file),
                                 ("--onnx", onnx)) if v is not None]
    if len(given) != 1:
        raise ValueError("give one of network, network_file or onnx")
    args = ["tasks", given[0][0], os.fspath(given[0][1]), "--json"]
    for opt, v in (("--layout", layout), ("--batch", batch), ("--seq-len", seq_len)):
        if v is not None:
            args += [opt, str(v)]
    for name, shape in (inputs or {}).items():
        args += ["--input", "%s=%s" % (name, _dims(shape))]
    if winograd is not None:
        args.append("--winograd" if winograd else "--no-winograd")
    return json.loads(run(args, cli))


def workload_key(workload, cli=None):
    """The workload key ktune gives a workload (a dict in the JSON form of
    docs/workloads.md): ["<hash>", [shape], ...] as a string. ValueError with
    ktune's message for a workload it rejects."""
    text = json.dumps(workload)
    try:
        # The first line `ktune kernel sample` prints is "workload KEY".
        out = run(["kernel", "sample", "--workload", text, "-n", "1"], cli)
    except KtuneError as e:
        raise ValueError("bad workload %s: %s" % (text, e.message)) from None
    first = out.split("\n", 1)[0]
    if not first.startswith("workload ["):
        raise KtuneError(None, "ktune kernel sample printed no workload key: %r" % first)
    return first[len("workload "):]
