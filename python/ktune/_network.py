"""ktune.Network: a network `ktune build` wrote, run from NumPy.

The build's NAME.h describes everything needed: the inputs (NAME_NUM_INPUTS,
NAME_INPUTk_NAME, _SHAPE, _DTYPE), the output shape, the entry points
(NAME_create, NAME_run, NAME_run_timed, NAME_run_inputs, NAME_set_threads,
...) and the build line. The shared library is compiled from that build line
(as a shared object) when it is missing or older than the source, then loaded
with ctypes, as `ktune run` does it (common/runtime/netrun.c).
"""
import ctypes
import glob
import os
import re
import shlex
import subprocess
import tempfile

import numpy as np

from ._errors import KtuneError

# Integer inputs (token ids, masks) travel as float32 values, exact up to 2^24.
INT_LIMIT = 1 << 24

_F32P = ctypes.POINTER(ctypes.c_float)
_F64P = ctypes.POINTER(ctypes.c_double)


def _define(header, key):
    m = re.search(r"^#define %s (.*)$" % re.escape(key), header, re.M)
    return m.group(1).strip() if m else None


def _shape(text):
    return tuple(int(d) for d in text.strip("{} ").split(",") if d.strip())


class Input:
    """One input of a network: its name in the model, shape and dtype
    ("float32", or "int" for token ids and masks, passed as float values)."""

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, shape, dtype

    def __repr__(self):
        return "Input(%r, %r, %r)" % (self.name, self.shape, self.dtype)


class Network:
    """The network `ktune build --out DIR` wrote in out_dir (name: the C
    prefix, needed only when DIR holds several builds).

    run() takes NumPy arrays in the model's own layout (NCHW for ONNX and
    PyTorch models) and returns the output as a float32 array. threads is
    the number of OpenMP threads of each run (default 1, as ktune run). One
    Network runs on one thread at a time; separate ones are independent.
    """

    def __init__(self, out_dir, name=None, threads=1):
        self.dir = os.path.abspath(out_dir)
        self.name = name or self._find_name()
        header_path = os.path.join(self.dir, self.name + ".h")
        try:
            with open(header_path) as f:
                header = f.read()
        except OSError as e:
            raise KtuneError(None, "no network %s in %s: %s" % (self.name, self.dir, e)) from None
        self._read_header(header, header_path)
        so = self._shared_library(header, header_path)
        try:
            self._lib = ctypes.CDLL(so)
        except OSError as e:
            raise KtuneError(None, "loading %s: %s" % (so, e)) from None
        self._bind()
        weights = os.path.join(self.dir, self.name + ".safetensors")
        self._inst = self._fn("create")(weights.encode())
        if not self._inst:
            raise KtuneError(None, "%s: %s" % (weights, self._last_error()))
        self.threads = threads
        self.steps = [(self._fn("step_name")(i).decode(), self._fn("step_task")(i))
                      for i in range(self._fn("num_steps")())]

    # ---- loading ----------------------------------------------------------------------------

    def _find_name(self):
        names = [os.path.basename(h)[:-2] for h in glob.glob(os.path.join(self.dir, "*.h"))]
        if len(names) != 1:
            raise KtuneError(None, "%s holds %s: give the network's name"
                             % (self.dir, "no NAME.h" if not names else
                                "several networks (%s)" % ", ".join(sorted(names))))
        return names[0]

    def _read_header(self, header, path):
        n = self.name
        count = _define(header, n + "_NUM_INPUTS")
        self.inputs = []
        for k in range(int(count) if count else 1):
            tag = "%s_INPUT%s_" % (n, k or "")
            shape, dtype = _define(header, tag + "SHAPE"), _define(header, tag + "DTYPE")
            if shape is None:
                raise KtuneError(None, "%s has no %sSHAPE" % (path, tag))
            self.inputs.append(Input((_define(header, tag + "NAME") or '""').strip('"'),
                                     _shape(shape), (dtype or '"float32"').strip('"')))
        out = _define(header, n + "_OUTPUT_SHAPE")
        if out is None:
            raise KtuneError(None, "%s has no %s_OUTPUT_SHAPE" % (path, n))
        self.output_shape = _shape(out)

    def _shared_library(self, header, path):
        """NAME.so (NAME_host.so for a CUDA build) beside the source, compiled
        from the header's build line unless it is there and newer."""
        m = re.search(r"Build: (.*?) -c (\S+)", header)
        link = re.search(r"link the program with ([^;)]*)", header)
        if not m:
            raise KtuneError(None, "%s has no build line" % path)
        src = os.path.join(self.dir, m.group(2))
        so = src[:-2] + ".so"
        if os.path.exists(so) and os.path.getmtime(so) >= os.path.getmtime(src):
            return so
        cmd = shlex.split(m.group(1))
        if os.environ.get("CC"):
            cmd[0] = os.environ["CC"]
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=self.dir)
        os.close(fd)
        libs = shlex.split(link.group(1) if link else "")
        if "-lcuda" in libs:
            # The CUDA build links the driver by its SONAME; the toolkit's stub
            # stands in at link time, as for ktune run.
            libs = ["-L" + os.path.join(os.path.dirname(a[2:]), "lib64", "stubs")
                    for a in cmd if a.startswith("-I") and a.endswith("/include")] + libs
        cmd += ["-shared", "-fPIC", "-o", tmp, src] + libs
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if p.returncode != 0:
                raise KtuneError(None, "compiling %s failed (%s): %s"
                                 % (src, " ".join(cmd), p.stderr.strip()))
            os.replace(tmp, so)   # whole or not at all, should another process load it
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return so

    def _fn(self, what):
        return getattr(self._lib, "%s_%s" % (self.name, what))

    def _bind(self):
        signatures = {
            "create": (ctypes.c_void_p, [ctypes.c_char_p]),
            "destroy": (None, [ctypes.c_void_p]),
            "run": (ctypes.c_int, [ctypes.c_void_p, _F32P, _F32P]),
            "run_timed": (ctypes.c_int, [ctypes.c_void_p, _F32P, _F32P, _F64P]),
            "set_threads": (ctypes.c_int, [ctypes.c_int]),
            "last_error": (ctypes.c_char_p, []),
            "num_steps": (ctypes.c_int, []),
            "step_name": (ctypes.c_char_p, [ctypes.c_int]),
            "step_task": (ctypes.c_int, [ctypes.c_int]),
        }
        if len(self.inputs) > 1:
            signatures["run_inputs"] = (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_F32P),
                                                       _F32P, _F64P])
        for what, (restype, argtypes) in signatures.items():
            try:
                fn = self._fn(what)
            except AttributeError:
                raise KtuneError(None, "the library of %s has no %s_%s"
                                 % (self.name, self.name, what)) from None
            fn.restype, fn.argtypes = restype, argtypes

    def _last_error(self):
        return (self._fn("last_error")() or b"").decode(errors="replace")

    def close(self):
        """Free the instance (its arena and weights)."""
        if getattr(self, "_inst", None):
            self._fn("destroy")(self._inst)
            self._inst = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "ktune.Network(%r: %s -> %r)" % (self.name, ", ".join(
            "%s %s%r" % (i.name, i.dtype, i.shape) for i in self.inputs), self.output_shape)

    # ---- running ----------------------------------------------------------------------------

    @property
    def threads(self):
        """OpenMP threads of each run."""
        return self._threads

    @threads.setter
    def threads(self, n):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError("threads must be a positive integer, not %r" % (n,))
        self._threads = n

    def _arrays(self, args, kwargs):
        """The inputs in order, each checked and as contiguous float32."""
        if args and kwargs:
            raise ValueError("give the inputs by position or by name, not both")
        if len(args) == 1 and isinstance(args[0], dict):
            kwargs, args = args[0], ()
        names = [i.name for i in self.inputs]
        if kwargs:
            unknown = sorted(set(kwargs) - set(names))
            if unknown:
                raise ValueError("%s has no input %s (its inputs: %s)"
                                 % (self.name, ", ".join(map(repr, unknown)), ", ".join(names)))
            missing = [n for n in names if n not in kwargs]
            if missing:
                raise ValueError("input %s not given" % ", ".join(map(repr, missing)))
            args = [kwargs[n] for n in names]
        if len(args) != len(self.inputs):
            raise ValueError("%s takes %d input%s (%s), got %d"
                             % (self.name, len(names), "" if len(names) == 1 else "s",
                                ", ".join(names), len(args)))
        return [self._check(spec, a) for spec, a in zip(self.inputs, args)]

    @staticmethod
    def _check(spec, a):
        a = np.asarray(a)
        what = "input %r" % spec.name
        if a.shape != spec.shape:
            raise ValueError("%s has shape %s, got %s" % (what, spec.shape, a.shape))
        if spec.dtype == "int":
            if not (a.dtype.kind in "iub" or a.dtype.kind == "f"):
                raise TypeError("%s holds integers (token ids, a mask), got %s"
                                % (what, a.dtype))
            if a.size and a.dtype.kind in "iu" and np.abs(a.astype(np.int64)).max() > INT_LIMIT:
                raise ValueError("%s: integer inputs must lie within +-2^24" % what)
        elif a.dtype.kind != "f" or a.dtype.itemsize < 4:
            raise TypeError("%s is %s, got %s (float32 or float64)" % (what, spec.dtype, a.dtype))
        return np.ascontiguousarray(a, dtype=np.float32)

    def _call(self, args, kwargs, seconds):
        if not self._inst:
            raise KtuneError(None, "the network %s is closed" % self.name)
        xs = self._arrays(args, kwargs)
        y = np.empty(self.output_shape, dtype=np.float32)
        if self._fn("set_threads")(self._threads) != 0:
            raise KtuneError(None, "cannot run on %d threads (built without OpenMP?)"
                             % self._threads)
        def ptr(a):
            return a.ctypes.data_as(_F32P)

        sec = seconds.ctypes.data_as(_F64P) if seconds is not None else None
        if len(xs) > 1:
            arr = (_F32P * len(xs))(*[ptr(x) for x in xs])
            rc = self._fn("run_inputs")(self._inst, arr, ptr(y), sec)
        elif seconds is not None:
            rc = self._fn("run_timed")(self._inst, ptr(xs[0]), ptr(y), sec)
        else:
            rc = self._fn("run")(self._inst, ptr(xs[0]), ptr(y))
        if rc != 0:
            raise KtuneError(None, "%s: %s" % (self.name, self._last_error()))
        return y

    def run(self, *inputs, **named):
        """Run the network: run(x), run(x0, x1, ...), run({"ids": a, ...}) or
        run(ids=a, ...). Each input must have its shape (ValueError); a
        float32 input takes float32 or float64 arrays, an integer one
        integers or bools (TypeError otherwise). Returns the output."""
        return self._call(inputs, named, None)

    def run_timed(self, *inputs, **named):
        """run(), timing each step: (output, seconds), seconds[i] the time of
        step i (self.steps[i]: its name and task, -1 for a simple layer)."""
        seconds = np.zeros(len(self.steps), dtype=np.float64)
        return self._call(inputs, named, seconds), seconds
