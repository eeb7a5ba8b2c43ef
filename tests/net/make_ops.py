"""Write one minimal ONNX model per operator case that test_ops.c runs.

usage: make_ops.py OUTDIR      write every case
       make_ops.py --list      print the case names, one a line

Each case NAME is a graph built with onnx.helper that has exactly one graph
input "x" (float32, a small static shape) and one float32 output "y":
  OUTDIR/NAME.onnx   the model (opset 13 unless the name ends in _oNN)
  OUTDIR/NAME.x.npy  its input, float32, from a RandomState seeded by the
                     name (positive where the operator needs it; halves such
                     as 0.5, 1.5, -0.5 where rounding or truncation is
                     tested; small integers where equality is)
  OUTDIR/NAME.y.npy  the expected output, computed here from x in float64
                     by PyTorch (torch 1.13), independently of the ONNX
                     graph; the few places that use numpy instead say so
plus OUTDIR/unsupported.onnx and OUTDIR/unsupported.x.npy: a graph whose
node "mystery" is an operator of a custom domain ktune does not know.

A case's name starts with its family (slice, split, gather, expand, tile,
transpose, pad, where, compare, logic, cast, binary, unary, reduce, softmax,
trilu, fold, concat); test_ops.c runs each family as one test. The fold
family's constant subgraphs (Shape -> Gather -> Range, ConstantOfShape,
Expand / Where / Trilu / Tile / Pad / Mod / Gather of constants) are added to
x, so only their folded value reaches the built network.

Needs python3-onnx and python3-torch (deploy/install-deps.sh); any failure
is a traceback and exit status 1.
"""
import os
import sys
import zlib

import numpy as np

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min

CASES = []   # (name, function returning (graph, x, y)), in definition order


def case(name):
    def register(fn):
        assert all(name != n for n, _ in CASES), name
        CASES.append((name, fn))
        return fn
    return register


# ---- graph building --------------------------------------------------------------------------

class G:
    """Nodes and initializers of one graph; node k of op T is named t<k>."""

    def __init__(self, opset=13):
        self.opset = opset
        self.nodes = []
        self.inits = []
        self.extra_opsets = []
        self.check = True
        self.k = 0

    def _name(self, base):
        self.k += 1
        return "%s%d" % (base, self.k)

    def const(self, arr, dtype=None):
        """An initializer holding arr (dtype: numpy type, default arr's own)."""
        from onnx import numpy_helper
        a = np.asarray(arr, dtype=dtype)
        name = self._name("c")
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def cnode(self, arr, dtype=None):
        """A Constant node holding arr (folding sees a node, not an initializer)."""
        from onnx import numpy_helper
        a = np.asarray(arr, dtype=dtype)
        return self.op("Constant", [], value=numpy_helper.from_array(a, self._name("v")))

    def i64(self, vals):
        return self.const(np.array(vals, dtype=np.int64))

    def op(self, op_type, inputs, nout=1, out=None, domain=None, name=None, **attrs):
        from onnx import helper
        name = name or self._name(op_type.lower())
        if out is not None:
            outs = [out]
        else:
            outs = ["%s_o%d" % (name, i) for i in range(nout)]
        kw = {"domain": domain} if domain else {}
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **kw,
                                           **attrs))
        return outs[0] if nout == 1 else outs

    def model(self, x, y, last):
        """The model whose output is tensor `last` (renamed y), with x's and y's shapes."""
        import onnx
        from onnx import TensorProto, helper
        # the output is named "y": rename the producer's output
        for n in self.nodes:
            for i, o in enumerate(n.output):
                if o == last:
                    n.output[i] = "y"
            for i, s in enumerate(n.input):
                if s == last:
                    n.input[i] = "y"
        graph = helper.make_graph(
            self.nodes, "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y.shape))],
            self.inits)
        opsets = [helper.make_opsetid("", self.opset)] + self.extra_opsets
        m = helper.make_model(graph, opset_imports=opsets, producer_name="make_ops.py")
        m.ir_version = 7
        if self.check:
            onnx.checker.check_model(m)
        return m


def rng(name):
    return np.random.RandomState(zlib.crc32(name.encode()) & 0x7FFFFFFF)


def randn(r, *shape, scale=1.0):
    return (r.randn(*shape) * scale).astype(np.float32)


def uniform(r, lo, hi, *shape):
    return r.uniform(lo, hi, shape).astype(np.float32)


def ints(r, lo, hi, *shape):
    """Integer values lo..hi as float32 (ties for comparisons, exact for Mod)."""
    return r.randint(lo, hi + 1, shape).astype(np.float32)


def away_from_zero(r, *shape):
    s = np.where(r.rand(*shape) < 0.5, -1.0, 1.0)
    return (s * r.uniform(0.5, 2.0, shape)).astype(np.float32)


def halves(r, *shape):
    """Random values with the ties 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0 and -0 in front."""
    a = r.uniform(-4, 4, int(np.prod(shape))).astype(np.float32)
    ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.0, -0.0, 3.5, -3.5, 2.0, -2.0],
                    np.float32)
    a[:len(ties)] = ties
    return a.reshape(shape)


def T(a):
    import torch
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def N(t):
    import torch
    if isinstance(t, torch.Tensor):
        t = t.detach().numpy()
    return np.array(t, dtype=np.float32, order="C")   # C order: what ktune reads


# ---- Slice -----------------------------------------------------------------------------------
# torch has no negative steps: a reversed axis is torch.flip, then a positive step.

@case("slice_neg_axis_neg_step_clamped")
def _(name):
    # start 100 clamps to 4, end -100 to -1 (before index 0): indices 4, 2, 0
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Slice", ["x", g.i64([100]), g.i64([-100]), g.i64([-1]), g.i64([-2])])
    return g, x, y, N(T(x).flip(-1)[..., ::2])


@case("slice_int64max_end")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Slice", ["x", g.i64([1]), g.i64([INT64_MAX]), g.i64([1])])
    return g, x, y, N(T(x)[:, 1:])


@case("slice_neg_step_int64min_end_reverses")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Slice", ["x", g.i64([-1]), g.i64([INT64_MIN]), g.i64([2]), g.i64([-1])])
    return g, x, y, N(T(x).flip(2))


@case("slice_neg_step_partial")
def _(name):
    # indices 2, 1 of axis 1 (end 0 excluded)
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Slice", ["x", g.i64([2]), g.i64([0]), g.i64([1]), g.i64([-1])])
    return g, x, y, N(T(x)[:, 1:3].flip(1))


@case("slice_multi_axes_unordered_mixed_bounds")
def _(name):
    # axis 3: [-4, 100) step 2 -> 1, 3; axis 0: [-1, MAX) -> 1; axis -2: [1, -1) -> 1, 2
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Slice", ["x", g.i64([-4, -1, 1]), g.i64([100, INT64_MAX, -1]), g.i64([3, 0, -2]),
                       g.i64([2, 1, 1])])
    return g, x, y, N(T(x)[1:2, :, 1:3, 1:5:2])


@case("slice_start_below_zero_clamped")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Slice", ["x", g.i64([-100, 2]), g.i64([1, 4]), g.i64([0, 3])])
    return g, x, y, N(T(x)[0:1, :, :, 2:4])


@case("slice_default_axes_and_steps")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Slice", ["x", g.i64([0, 1, 1, 0]), g.i64([2, 3, 4, -1])])
    return g, x, y, N(T(x)[0:2, 1:3, 1:4, 0:4])


@case("slice_neg_step_reverses_o11")
def _(name):
    # opset 11: inputs; end -6 + 5 = -1 clamps to -1 (through index 0)
    g, x = G(11), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Slice", ["x", g.i64([-1]), g.i64([-6]), g.i64([-1]), g.i64([-1])])
    return g, x, y, N(T(x).flip(-1))


@case("slice_attrs_o9")
def _(name):
    # opset 9: starts, ends and axes are attributes
    g, x = G(9), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Slice", ["x"], starts=[1, 0], ends=[3, -1], axes=[2, 3])
    return g, x, y, N(T(x)[:, :, 1:3, 0:4])


@case("slice_packed_projection_parts")
def _(name):
    # x @ W + b read only by slices of its last axis (a packed q/k/v
    # projection): each part becomes a dense layer of its own rows; the
    # parts overlap, leave columns out and come in any order
    import torch
    r = rng(name)
    x, w, b = randn(r, 1, 5, 6), randn(r, 6, 14, scale=0.4), randn(r, 14)
    g = G()
    a = g.op("Add", [g.const(b), g.op("MatMul", ["x", g.const(w)])])
    runs = [(8, 12), (0, 4), (2, 8)]
    parts = [g.op("Slice", [a, g.i64([s]), g.i64([e]), g.i64([-1])]) for s, e in runs]
    y = g.op("Concat", [g.op("Relu", [parts[0]]), parts[1], g.op("Sigmoid", [parts[2]])], axis=-1)
    t = T(x) @ T(w) + T(b)
    return g, x, y, N(torch_cat([t[..., 8:12].relu(), t[..., 0:4], t[..., 2:8].sigmoid()], -1))


@case("slice_packed_projection_read_whole_stays")
def _(name):
    # a projection whose output something else reads whole keeps its slices
    import torch
    r = rng(name)
    x, w = randn(r, 4, 6), randn(r, 6, 8, scale=0.4)
    g = G()
    a = g.op("MatMul", ["x", g.const(w)])
    s0 = g.op("Slice", [a, g.i64([0]), g.i64([4]), g.i64([-1])])
    s1 = g.op("Slice", [a, g.i64([4]), g.i64([8]), g.i64([-1])])
    y = g.op("Concat", [s1, a, g.op("Tanh", [s0])], axis=-1)
    t = T(x) @ T(w)
    return g, x, y, N(torch_cat([t[:, 4:8], t, t[:, 0:4].tanh()], -1))


# ---- Split -----------------------------------------------------------------------------------
# One graph output: the parts are concatenated in another order.

@case("split_equal_axis1_o13")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    a, b, c = g.op("Split", ["x"], nout=3, axis=1)
    y = g.op("Concat", [c, a, b], axis=1)
    t = T(x)
    return g, x, y, N(torch_cat([t[:, 2:3], t[:, 0:1], t[:, 1:2]], 1))


@case("split_input_neg_axis_o13")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    a, b = g.op("Split", ["x", g.i64([1, 3])], nout=2, axis=-2)
    y = g.op("Concat", [b, a], axis=2)
    t = T(x)
    return g, x, y, N(torch_cat([t[:, :, 1:], t[:, :, :1]], 2))


@case("split_input_one_part_broadcast_sub_o13")
def _(name):
    # y = part 2 (4 wide) - part 1 (1 wide), broadcasting the 1
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    a, b = g.op("Split", ["x", g.i64([1, 4])], nout=2, axis=-1)
    y = g.op("Sub", [b, a])
    t = T(x)
    return g, x, y, N(t[..., 1:] - t[..., :1])


@case("split_attr_o11")
def _(name):
    # opset 11: split is an attribute
    g, x = G(11), randn(rng(name), 2, 3, 4, 5)
    a, b = g.op("Split", ["x"], nout=2, axis=-1, split=[2, 3])
    y = g.op("Concat", [b, a], axis=-1)
    t = T(x)
    return g, x, y, N(torch_cat([t[..., 2:], t[..., :2]], -1))


@case("split_equal_o11")
def _(name):
    g, x = G(11), randn(rng(name), 2, 3, 4, 5)
    a, b = g.op("Split", ["x"], nout=2, axis=2)
    y = g.op("Concat", [b, a], axis=2)
    t = T(x)
    return g, x, y, N(torch_cat([t[:, :, 2:], t[:, :, :2]], 2))


def torch_cat(ts, dim):
    import torch
    return torch.cat(ts, dim)


# ---- Gather ----------------------------------------------------------------------------------

@case("gather_scalar_index_rank_drops")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Gather", ["x", g.const(np.array(2, np.int64))], axis=1)
    return g, x, y, N(T(x)[:, 2])


@case("gather_scalar_neg_index_axis0")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Gather", ["x", g.const(np.array(-1, np.int64))], axis=0)
    return g, x, y, N(T(x)[1])


@case("gather_neg_indices_neg_axis")
def _(name):
    import torch
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Gather", ["x", g.i64([-1, 0, -3])], axis=-1)
    return g, x, y, N(torch.index_select(T(x), 3, torch.tensor([4, 0, 2])))


@case("gather_2d_indices_axis2")
def _(name):
    import torch
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Gather", ["x", g.i64([[0, -1], [2, 1]])], axis=2)
    return g, x, y, N(T(x)[:, :, torch.tensor([[0, 3], [2, 1]])])


def trunc_halves(r, lo, hi, *shape):
    """Values k + u, k in [lo, hi], u in [0.2, 0.8]: well away from the integers."""
    return (r.randint(lo, hi + 1, shape) + r.uniform(0.2, 0.8, shape)).astype(np.float32)


@case("gather_const_table_by_activation_indices")
def _(name):
    # indices = Cast(x, int64), truncated toward zero: -9..9 (negative from the end)
    import torch
    r = rng(name)
    x = trunc_halves(r, -10, 9, 2, 3)
    table = randn(r, 10, 4)
    g = G()
    idx = g.op("Cast", ["x"], to=7)
    y = g.op("Gather", [g.const(table), idx], axis=0)
    i = torch.trunc(T(x)).long() % 10
    return g, x, y, N(T(table)[i])


@case("gather_const_table_by_activation_axis1")
def _(name):
    import torch
    r = rng(name)
    x = trunc_halves(r, 0, 5, 2, 2)
    table = randn(r, 3, 6)
    g = G()
    idx = g.op("Cast", ["x"], to=7)
    y = g.op("Gather", [g.const(table), idx], axis=1)
    i = torch.trunc(T(x)).long()
    return g, x, y, N(T(table)[:, i])


# ---- Expand, Tile, Transpose -----------------------------------------------------------------

@case("expand_to_higher_rank")
def _(name):
    g, x = G(), randn(rng(name), 3, 1, 5)
    y = g.op("Expand", ["x", g.i64([2, 3, 4, 5])])
    return g, x, y, N(T(x).expand(2, 3, 4, 5))


@case("expand_shape_ones_keep_input_dims")
def _(name):
    # ONNX Expand broadcasts both ways: shape [2, 1, 4, 1] with x [3, 1, 5]
    g, x = G(), randn(rng(name), 3, 1, 5)
    y = g.op("Expand", ["x", g.i64([2, 1, 4, 1])])
    return g, x, y, N(T(x).expand(2, 3, 4, 5))


@case("expand_shape_of_lower_rank")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 1, 5)
    y = g.op("Expand", ["x", g.i64([4, 1])])
    return g, x, y, N(T(x).expand(2, 3, 4, 5))


@case("tile_3d")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4)
    y = g.op("Tile", ["x", g.i64([2, 1, 3])])
    return g, x, y, N(T(x).repeat(2, 1, 3))


@case("tile_4d_two_axes")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Tile", ["x", g.i64([1, 2, 1, 2])])
    return g, x, y, N(T(x).repeat(1, 2, 1, 2))


@case("transpose_perm_3102")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Transpose", ["x"], perm=[3, 1, 0, 2])
    return g, x, y, N(T(x).permute(3, 1, 0, 2))


@case("transpose_default_reverses")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Transpose", ["x"])
    return g, x, y, N(T(x).permute(3, 2, 1, 0))


# ---- Pad -------------------------------------------------------------------------------------
# ONNX pads are [begin of each axis..., end of each axis...]; torch's F.pad
# takes (begin, end) pairs from the last axis back.

def torch_pads(pads):
    r = len(pads) // 2
    out = []
    for d in range(r - 1, -1, -1):
        out += [pads[d], pads[d + r]]
    return out


def fpad(x, pads, mode="constant", value=0.0):
    import torch.nn.functional as F
    if mode == "constant":
        return N(F.pad(T(x), torch_pads(pads), mode="constant", value=value))
    # torch pads only the last two axes of a 4-D tensor in these modes: the
    # cases pad nothing before them, and the zero pairs are dropped
    tp = torch_pads(pads)
    while len(tp) > 4 and tp[-2:] == [0, 0]:
        tp = tp[:-2]
    return N(F.pad(T(x), tp, mode={"reflect": "reflect", "edge": "replicate"}[mode]))


@case("pad_constant_value_o13")
def _(name):
    pads = [1, 0, 2, 0, 0, 1, 0, 3]
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Pad", ["x", g.i64(pads), g.const(np.array(1.5, np.float32))], mode="constant")
    return g, x, y, fpad(x, pads, value=1.5)


@case("pad_reflect_o13")
def _(name):
    pads = [0, 0, 1, 2, 0, 0, 2, 1]
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Pad", ["x", g.i64(pads)], mode="reflect")
    return g, x, y, fpad(x, pads, "reflect")


@case("pad_edge_o13")
def _(name):
    # pads wider than the axis are fine for edge
    pads = [0, 0, 3, 1, 0, 0, 0, 6]
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Pad", ["x", g.i64(pads)], mode="edge")
    return g, x, y, fpad(x, pads, "edge")


@case("pad_negative_crops_o13")
def _(name):
    pads = [0, -1, 1, 0, 0, 0, -2, 1]
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Pad", ["x", g.i64(pads)])
    return g, x, y, fpad(x, pads)


@case("pad_then_avgpool_o13")
def _(name):
    # avg_pool2d(padding=p, count_include_pad=True) as PyTorch exports it: the
    # Pad becomes the pool's padding, its zeros counted
    import torch.nn.functional as F
    pads = [0, 0, 1, 2, 0, 0, 1, 2]
    g, x = G(), randn(rng(name), 1, 3, 6, 7)
    p = g.op("Pad", ["x", g.i64(pads)], mode="constant")
    y = g.op("AveragePool", [p], kernel_shape=[3, 3], strides=[2, 1])
    return g, x, y, N(F.avg_pool2d(F.pad(T(x), [2, 2, 1, 1]), 3, (2, 1)))


@case("pad_then_avgpool_own_pads_o13")
def _(name):
    # the pool's own padding, counted (count_include_pad=1), on top of the Pad's
    import torch.nn.functional as F
    pads = [0, 0, 1, 0, 0, 0, 0, 1]
    g, x = G(), randn(rng(name), 1, 2, 5, 5)
    p = g.op("Pad", ["x", g.i64(pads)], mode="constant")
    y = g.op("AveragePool", [p], kernel_shape=[3, 3], pads=[0, 1, 1, 0], count_include_pad=1)
    want = F.avg_pool2d(F.pad(T(x), [1, 1, 1, 1]), 3, 1)
    return g, x, y, N(want)


@case("pad_then_maxpool_stays_o13")
def _(name):
    # zeros are no -inf: a max pool keeps its Pad as a step of its own
    import torch.nn.functional as F
    pads = [0, 0, 1, 1, 0, 0, 1, 1]
    g, x = G(), randn(rng(name), 1, 2, 5, 5)
    p = g.op("Pad", ["x", g.i64(pads)], mode="constant")
    y = g.op("MaxPool", [p], kernel_shape=[3, 3])
    return g, x, y, N(F.max_pool2d(F.pad(T(x), [1, 1, 1, 1]), 3, 1))


@case("pad_attrs_o10")
def _(name):
    # opset 10: pads and value are attributes
    pads = [0, 0, 1, 1, 0, 0, 1, 1]
    g, x = G(10), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Pad", ["x"], pads=pads, mode="constant", value=-2.0)
    return g, x, y, fpad(x, pads, value=-2.0)


@case("pad_reflect_o11")
def _(name):
    pads = [0, 0, 2, 0, 0, 0, 1, 3]
    g, x = G(11), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Pad", ["x", g.i64(pads)], mode="reflect")
    return g, x, y, fpad(x, pads, "reflect")


@case("pad_constant_value_input_o11")
def _(name):
    pads = [0, 1, 0, 0, 0, 0, 0, 2]
    g, x = G(11), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Pad", ["x", g.i64(pads), g.const(np.array(-0.75, np.float32))])
    return g, x, y, fpad(x, pads, value=-0.75)


@case("pad_edge_o17")
def _(name):
    pads = [0, 0, 1, 0, 0, 0, 2, 2]
    g, x = G(17), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Pad", ["x", g.i64(pads)], mode="edge")
    return g, x, y, fpad(x, pads, "edge")


# ---- Where, comparisons, logic ---------------------------------------------------------------

@case("where_broadcast_cond_from_x")
def _(name):
    import torch
    r = rng(name)
    x, a = randn(r, 2, 1, 4, 1), randn(r, 3, 1, 5)
    g = G()
    cond = g.op("Less", ["x", g.const(np.array(0, np.float32))])
    y = g.op("Where", [cond, g.const(a), "x"])
    return g, x, y, N(torch.where(T(x) < 0, T(a), T(x)))


@case("where_const_cond_broadcast")
def _(name):
    import torch
    r = rng(name)
    x = randn(r, 2, 1, 4, 1)
    c = r.rand(3, 1, 5) < 0.5
    g = G()
    y = g.op("Where", [g.const(c), "x", g.op("Neg", ["x"])])
    return g, x, y, N(torch.where(torch.from_numpy(c), T(x), -T(x)))


@case("where_scalar_else_greater_broadcast")
def _(name):
    import torch
    r = rng(name)
    x, c = randn(r, 2, 1, 4, 1), randn(r, 3, 1, 5)
    g = G()
    cond = g.op("Greater", ["x", g.const(c)])
    y = g.op("Where", [cond, "x", g.const(np.array(0.25, np.float32))])
    return g, x, y, N(torch.where(T(x) > T(c), T(x), T(0.25)))


def compare_case(onnx_op, fn):
    # x and c are small integers (ties happen), [2, 1, 4, 1] against [3, 1, 5]
    def build(name):
        r = rng(name)
        x, c = ints(r, -2, 2, 2, 1, 4, 1), ints(r, -2, 2, 3, 1, 5)
        g = G()
        b = g.op(onnx_op, ["x", g.const(c)])
        y = g.op("Cast", [b], to=1)
        return g, x, y, N(fn(T(x), T(c)).double())
    return build


case("compare_equal_cast_float")(compare_case("Equal", lambda a, b: a == b))
case("compare_less_cast_float")(compare_case("Less", lambda a, b: a < b))
case("compare_greater_cast_float")(compare_case("Greater", lambda a, b: a > b))
case("compare_less_or_equal_cast_float")(compare_case("LessOrEqual", lambda a, b: a <= b))
case("compare_greater_or_equal_cast_float")(compare_case("GreaterOrEqual", lambda a, b: a >= b))


@case("compare_equal_in_where")
def _(name):
    import torch
    r = rng(name)
    x, c = ints(r, -1, 1, 2, 1, 4, 1), ints(r, -1, 1, 3, 1, 5)
    g = G()
    eq = g.op("Equal", ["x", g.const(c)])
    y = g.op("Where", [eq, g.const(np.array(10, np.float32)), "x"])
    return g, x, y, N(torch.where(T(x) == T(c), T(10.0), T(x)))


@case("logic_and_or_not_cast_float")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    a = g.op("Less", ["x", g.const(np.array(1, np.float32))])
    b = g.op("Greater", ["x", g.const(np.array(-1, np.float32))])
    c = g.op("Greater", ["x", g.const(np.array(0.5, np.float32))])
    o = g.op("Or", [g.op("And", [a, b]), g.op("Not", [c])])
    y = g.op("Cast", [o], to=1)
    t = T(x)
    return g, x, y, N((((t < 1) & (t > -1)) | ~(t > 0.5)).double())


@case("logic_and_const_broadcast")
def _(name):
    r = rng(name)
    x = randn(r, 2, 1, 4, 1)
    c = r.rand(3, 1, 5) < 0.5
    g = G()
    a = g.op("And", [g.op("Less", ["x", g.const(np.array(0, np.float32))]), g.const(c)])
    y = g.op("Cast", [a], to=1)
    import torch
    return g, x, y, N(((T(x) < 0) & torch.from_numpy(c)).double())


# ---- Cast ------------------------------------------------------------------------------------

@case("cast_int64_truncates_toward_zero")
def _(name):
    r = rng(name)
    x = halves(r, 2, 3, 4, 5)
    x.reshape(-1)[12:18] = [-2.7, 2.7, -0.9, 0.9, 1000.3, -1000.3]
    g = G()
    y = g.op("Cast", [g.op("Cast", ["x"], to=7)], to=1)
    return g, x, y, N(T(x).long().double())   # torch's .long() truncates toward zero


@case("cast_bool_is_nonzero")
def _(name):
    r = rng(name)
    x = randn(r, 2, 3, 4, 5)
    x[r.rand(*x.shape) < 0.3] = 0
    x.reshape(-1)[0] = -0.0
    g = G()
    y = g.op("Cast", [g.op("Cast", ["x"], to=9)], to=1)
    return g, x, y, N((T(x) != 0).double())


@case("cast_float_to_float")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("Cast", ["x"], to=1)
    return g, x, y, x.copy()


# ---- binary ----------------------------------------------------------------------------------

@case("binary_mod_fmod1_neg_broadcast")
def _(name):
    # fmod 1 (floats): the sign of the dividend
    import torch
    r = rng(name)
    x = randn(r, 2, 1, 4, 1, scale=5)
    c = np.array([-3, 2.5, -1.5, 4, 1.25], np.float32).reshape(1, 5) * \
        np.array([1, -1, 0.5], np.float32).reshape(3, 1)
    c = c.reshape(3, 1, 5)
    g = G()
    y = g.op("Mod", ["x", g.const(c)], fmod=1)
    return g, x, y, N(torch.fmod(T(x), T(c)))


@case("binary_mod_fmod0_int_neg_broadcast")
def _(name):
    # fmod 0 needs integers: x (integer values) cast to int64, the sign of the divisor
    import torch
    r = rng(name)
    x = ints(r, -7, 7, 2, 1, 4, 1)
    c = np.array([[2, -3, 4, -5, 3], [-2, 5, -4, 3, 2], [7, -7, 1, -1, 6]],
                 np.int64).reshape(3, 1, 5)
    g = G()
    m = g.op("Mod", [g.op("Cast", ["x"], to=7), g.const(c)], fmod=0)
    y = g.op("Cast", [m], to=1)
    return g, x, y, N(torch.remainder(torch.from_numpy(x.astype(np.int64)),
                                      torch.from_numpy(c)).double())


@case("binary_pow_int_exponent_neg_base")
def _(name):
    import torch
    r = rng(name)
    x = randn(r, 2, 1, 4, 1, scale=1.5)
    e = ints(r, 0, 3, 3, 1, 5)
    g = G()
    y = g.op("Pow", ["x", g.const(e)])
    return g, x, y, N(torch.pow(T(x), T(e)))


@case("binary_pow_fractional_exponent")
def _(name):
    import torch
    r = rng(name)
    x = uniform(r, 0.1, 3, 2, 3, 4, 5)
    e = np.array([0.5, -1.5, 2.2, 0, 1], np.float32)
    g = G()
    y = g.op("Pow", ["x", g.const(e)])
    return g, x, y, N(torch.pow(T(x), T(e)))


@case("binary_max_broadcast")
def _(name):
    import torch
    r = rng(name)
    x, c = randn(r, 2, 1, 4, 1), randn(r, 3, 1, 5)
    g = G()
    y = g.op("Max", ["x", g.const(c)])
    return g, x, y, N(torch.maximum(T(x), T(c)))


@case("binary_min_broadcast")
def _(name):
    import torch
    r = rng(name)
    x, c = randn(r, 2, 1, 4, 1), randn(r, 3, 1, 5)
    g = G()
    y = g.op("Min", [g.const(c), "x"])
    return g, x, y, N(torch.minimum(T(c), T(x)))


@case("binary_max_three_inputs")
def _(name):
    # Max is variadic
    import torch
    r = rng(name)
    x, c1, c2 = randn(r, 2, 3, 4, 5), randn(r, 4, 1), randn(r, 5)
    g = G()
    y = g.op("Max", ["x", g.const(c1), g.const(c2)])
    return g, x, y, N(torch.maximum(torch.maximum(T(x), T(c1)), T(c2)))


@case("binary_div_const_by_x_broadcast")
def _(name):
    r = rng(name)
    x, c = away_from_zero(r, 2, 1, 4, 1), randn(r, 3, 1, 5)
    g = G()
    y = g.op("Div", [g.const(c), "x"])
    return g, x, y, N(T(c) / T(x))


@case("binary_sub_const_minus_x_broadcast")
def _(name):
    r = rng(name)
    x, c = randn(r, 2, 1, 4, 1), randn(r, 3, 1, 5)
    g = G()
    y = g.op("Sub", [g.const(c), "x"])
    return g, x, y, N(T(c) - T(x))


# ---- elementwise unary -----------------------------------------------------------------------

def unary_case(onnx_op, fn, make_x=None, opset=13, **attrs):
    def build(name):
        r = rng(name)
        x = make_x(r) if make_x else randn(r, 2, 3, 4, 5, scale=2)
        g = G(opset)
        y = g.op(onnx_op, ["x"], **attrs)
        return g, x, y, N(fn(T(x)))
    return build


def tf(expr):
    """fn(t) evaluating expr with torch as `torch` and torch.nn.functional as `F`."""
    def fn(t):
        import torch
        import torch.nn.functional as F
        return eval(expr, {"torch": torch, "F": F, "t": t})
    return fn


def positive(r):
    return uniform(r, 0.1, 3, 2, 3, 4, 5)


case("unary_erf")(unary_case("Erf", tf("torch.erf(t)")))
case("unary_exp")(unary_case("Exp", tf("torch.exp(t)")))
case("unary_log_positive")(unary_case("Log", tf("torch.log(t)"), positive))
case("unary_sqrt_positive")(unary_case("Sqrt", tf("torch.sqrt(t)"), positive))
case("unary_reciprocal")(unary_case("Reciprocal", tf("torch.reciprocal(t)"),
                                    lambda r: away_from_zero(r, 2, 3, 4, 5)))
case("unary_neg")(unary_case("Neg", tf("torch.neg(t)")))
case("unary_abs")(unary_case("Abs", tf("torch.abs(t)")))
case("unary_softplus")(unary_case("Softplus", tf("F.softplus(t)")))
case("unary_softsign")(unary_case("Softsign", tf("F.softsign(t)")))
case("unary_leakyrelu_alpha")(unary_case("LeakyRelu", tf("F.leaky_relu(t, 0.1)"), alpha=0.1))
# ONNX HardSigmoid is max(0, min(1, alpha x + beta)); torch's has alpha 1/6, so it is written out
case("unary_hardsigmoid_alpha_beta")(unary_case(
    "HardSigmoid", tf("torch.clamp(0.3 * t + 0.6, 0, 1)"), alpha=0.3, beta=0.6))
case("unary_hardswish_o14")(unary_case("HardSwish", tf("F.hardswish(t)"), opset=14))
case("unary_elu_alpha")(unary_case("Elu", tf("F.elu(t, 0.7)"), alpha=0.7))
case("unary_selu_default")(unary_case("Selu", tf("torch.selu(t)")))
case("unary_celu_alpha")(unary_case("Celu", tf("F.celu(t, 1.5)"), alpha=1.5))
case("unary_thresholdedrelu_alpha")(unary_case(
    "ThresholdedRelu", tf("F.threshold(t, 0.4, 0.0)"), alpha=0.4))
case("unary_floor_ties")(unary_case("Floor", tf("torch.floor(t)"),
                                    lambda r: halves(r, 2, 3, 4, 5)))
case("unary_ceil_ties")(unary_case("Ceil", tf("torch.ceil(t)"), lambda r: halves(r, 2, 3, 4, 5)))
# ONNX Round rounds halves to even, as torch.round does
case("unary_round_half_to_even")(unary_case("Round", tf("torch.round(t)"),
                                            lambda r: halves(r, 2, 3, 4, 5)))
case("unary_sin")(unary_case("Sin", tf("torch.sin(t)")))
case("unary_cos")(unary_case("Cos", tf("torch.cos(t)")))
case("unary_sign_zeros")(unary_case("Sign", tf("torch.sign(t)"),
                                    lambda r: halves(r, 2, 3, 4, 5).round()))


@case("unary_mish_o18")
def _(name):
    # Mish is an opset-18 operator, newer than onnx 1.12's checker: written unchecked
    import torch.nn.functional as F
    g, x = G(18), randn(rng(name), 2, 3, 4, 5, scale=2)
    g.check = False
    y = g.op("Mish", ["x"])
    return g, x, y, N(F.mish(T(x)))


# ---- reductions ------------------------------------------------------------------------------
# torch.prod reduces one axis at a time; ReduceLogSum is torch.log of the sum.

def red(t, fn, axes, keep):
    """fn over each axis in turn from the highest (the result of a multi-axis reduction)."""
    for a in sorted([a % t.dim() for a in axes], reverse=True):
        t = fn(t, a, keep)
    return t


@case("reduce_sum_axes_input_nonadjacent_keepdims0_o13")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceSum", ["x", g.i64([-1, 1])], keepdims=0)
    return g, x, y, N(T(x).sum(dim=(1, 3)))


@case("reduce_sum_axes_attr_keepdims1_o11")
def _(name):
    # opset 11: axes is an attribute
    g, x = G(11), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceSum", ["x"], axes=[1, 3], keepdims=1)
    return g, x, y, N(T(x).sum(dim=(1, 3), keepdim=True))


@case("reduce_sum_all_axes_keepdims0_o13")
def _(name):
    # no axes input: every axis, a rank-0 output
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceSum", ["x"], keepdims=0)
    return g, x, y, N(T(x).sum())


@case("reduce_sum_noop_with_empty_axes_o13")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceSum", ["x"], noop_with_empty_axes=1)
    return g, x, y, x.copy()


@case("reduce_mean_nonadjacent_keepdims0")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceMean", ["x"], axes=[0, 2], keepdims=0)
    return g, x, y, N(T(x).mean(dim=(0, 2)))


@case("reduce_mean_all_axes_keepdims1_o17")
def _(name):
    g, x = G(17), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceMean", ["x"])
    return g, x, y, N(T(x).mean().reshape(1, 1, 1, 1))


@case("reduce_max_all_axes_keepdims0")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceMax", ["x"], keepdims=0)
    return g, x, y, N(T(x).amax())


@case("reduce_max_nonadjacent_keepdims0_o11")
def _(name):
    import torch
    g, x = G(11), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceMax", ["x"], axes=[0, -2], keepdims=0)
    return g, x, y, N(torch.amax(T(x), dim=(0, 2)))


@case("reduce_min_neg_axis_keepdims1")
def _(name):
    import torch
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceMin", ["x"], axes=[-1])
    return g, x, y, N(torch.amin(T(x), dim=3, keepdim=True))


@case("reduce_prod_nonadjacent_keepdims0")
def _(name):
    g, x = G(), uniform(rng(name), 0.5, 1.5, 2, 3, 4, 5)
    y = g.op("ReduceProd", ["x"], axes=[1, 3], keepdims=0)
    return g, x, y, N(red(T(x), lambda t, a, k: t.prod(a, keepdim=k), [1, 3], False))


@case("reduce_l1_last_two_keepdims0")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceL1", ["x"], axes=[2, 3], keepdims=0)
    return g, x, y, N(T(x).abs().sum(dim=(2, 3)))


@case("reduce_l2_nonadjacent_keepdims1")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceL2", ["x"], axes=[0, 3], keepdims=1)
    return g, x, y, N((T(x) ** 2).sum(dim=(0, 3), keepdim=True).sqrt())


@case("reduce_sumsquare_axis1_keepdims0")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    y = g.op("ReduceSumSquare", ["x"], axes=[1], keepdims=0)
    return g, x, y, N((T(x) ** 2).sum(dim=1))


@case("reduce_logsum_positive")
def _(name):
    g, x = G(), positive(rng(name))
    y = g.op("ReduceLogSum", ["x"], axes=[1, 2])
    return g, x, y, N(T(x).sum(dim=(1, 2), keepdim=True).log())


@case("reduce_logsumexp_neg_axes_keepdims0")
def _(name):
    import torch
    g, x = G(), randn(rng(name), 2, 3, 4, 5, scale=3)
    y = g.op("ReduceLogSumExp", ["x"], axes=[-1, -3], keepdims=0)
    return g, x, y, N(torch.logsumexp(T(x), dim=(1, 3)))


# ---- Softmax, LogSoftmax ---------------------------------------------------------------------
# Before opset 13 the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])].

@case("softmax_axis1_o13")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5, scale=2)
    y = g.op("Softmax", ["x"], axis=1)
    return g, x, y, N(T(x).softmax(1))


@case("softmax_axis0_o13")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5, scale=2)
    y = g.op("Softmax", ["x"], axis=0)
    return g, x, y, N(T(x).softmax(0))


@case("softmax_neg_axis2_o13")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5, scale=2)
    y = g.op("Softmax", ["x"], axis=-2)
    return g, x, y, N(T(x).softmax(2))


@case("softmax_axis1_coerced_2d_o11")
def _(name):
    g, x = G(11), randn(rng(name), 2, 3, 4, 5, scale=2)
    y = g.op("Softmax", ["x"], axis=1)
    return g, x, y, N(T(x).reshape(2, 60).softmax(1).reshape(2, 3, 4, 5))


@case("softmax_axis2_coerced_2d_o11")
def _(name):
    g, x = G(11), randn(rng(name), 2, 3, 4, 5, scale=2)
    y = g.op("Softmax", ["x"], axis=2)
    return g, x, y, N(T(x).reshape(6, 20).softmax(1).reshape(2, 3, 4, 5))


@case("softmax_log_axis1_o13")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5, scale=2)
    y = g.op("LogSoftmax", ["x"], axis=1)
    return g, x, y, N(T(x).log_softmax(1))


@case("softmax_log_default_last_axis_o13")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5, scale=2)
    y = g.op("LogSoftmax", ["x"])
    return g, x, y, N(T(x).log_softmax(-1))


@case("softmax_log_default_coerced_2d_o11")
def _(name):
    # opset 11's default axis is 1
    g, x = G(11), randn(rng(name), 2, 3, 4, 5, scale=2)
    y = g.op("LogSoftmax", ["x"])
    return g, x, y, N(T(x).reshape(2, 60).log_softmax(1).reshape(2, 3, 4, 5))


# ---- Trilu (opset 14) ------------------------------------------------------------------------

def trilu_case(upper, k):
    def build(name):
        import torch
        g, x = G(14), randn(rng(name), 2, 4, 5)
        ins = ["x"] if k is None else ["x", g.const(np.array(k, np.int64))]
        y = g.op("Trilu", ins, upper=upper)
        f = torch.triu if upper else torch.tril
        return g, x, y, N(f(T(x), 0 if k is None else k))
    return build


case("trilu_upper_k1")(trilu_case(1, 1))
case("trilu_upper_kneg1")(trilu_case(1, -1))
case("trilu_lower_k1")(trilu_case(0, 1))
case("trilu_lower_kneg1")(trilu_case(0, -1))
case("trilu_upper_no_k")(trilu_case(1, None))
case("trilu_lower_k_beyond_all_zero")(trilu_case(0, -4))


# ---- constant subgraphs, folded at import, added to x ----------------------------------------

@case("fold_shape_gather_range_cast_add")
def _(name):
    import torch
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    n = g.op("Gather", [g.op("Shape", ["x"]), g.const(np.array(3, np.int64))], axis=0)
    rg = g.op("Range", [g.const(np.array(0, np.int64)), n, g.const(np.array(1, np.int64))])
    y = g.op("Add", ["x", g.op("Cast", [rg], to=1)])
    return g, x, y, N(T(x) + torch.arange(5, dtype=torch.float64))


@case("fold_hardswish_pattern_add")
def _(name):
    # c * HardSigmoid(c) of a constant is the hardswish pattern, folded
    import torch
    import torch.nn.functional as F
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    c = np.array([-4.0, -1.0, 0.0, 1.5, 4.0], np.float32)
    cv = g.const(c)
    y = g.op("Add", ["x", g.op("Mul", [cv, g.op("HardSigmoid", [cv], alpha=1.0 / 6.0)])])
    return g, x, y, N(T(x) + F.hardswish(torch.tensor(c, dtype=torch.float64)))


@case("fold_range_float_add")
def _(name):
    import torch
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    rg = g.op("Range", [g.cnode(np.array(0.5, np.float32)), g.cnode(np.array(3.0, np.float32)),
                        g.cnode(np.array(0.5, np.float32))])
    y = g.op("Add", ["x", rg])
    return g, x, y, N(T(x) + torch.arange(0.5, 3.0, 0.5, dtype=torch.float64))


@case("fold_constantofshape_add")
def _(name):
    from onnx import numpy_helper
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    c = g.op("ConstantOfShape", [g.i64([4, 5])],
             value=numpy_helper.from_array(np.array([2.5], np.float32)))
    y = g.op("Add", ["x", c])
    return g, x, y, N(T(x) + 2.5)


@case("fold_shape_constantofshape_mul")
def _(name):
    from onnx import numpy_helper
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    c = g.op("ConstantOfShape", [g.op("Shape", ["x"])],
             value=numpy_helper.from_array(np.array([-0.25], np.float32)))
    y = g.op("Mul", ["x", c])
    return g, x, y, N(T(x) * -0.25)


@case("fold_expand_const_add")
def _(name):
    r = rng(name)
    x, c = randn(r, 2, 3, 4, 5), randn(r, 1, 5)
    g = G()
    y = g.op("Add", ["x", g.op("Expand", [g.const(c), g.i64([4, 5])])])
    return g, x, y, N(T(x) + T(c).expand(4, 5))


@case("fold_large_weight_scaled_and_transposed")
def _(name):
    # A weight of 6,272 values (more than the importer keeps in memory) that the
    # graph scales and transposes before the Conv reads it: folded from its
    # tensor, the convolution gets constant weights.
    import torch
    r = rng(name)
    x, w, s = randn(r, 1, 8, 12, 12), randn(r, 16, 8, 7, 7, scale=0.1), uniform(r, 0.5, 1.5, 16, 1, 1, 1)
    g = G()
    wt = g.op("Transpose", [g.op("Mul", [g.const(w), g.const(s)])], perm=[0, 1, 3, 2])
    y = g.op("Conv", ["x", wt], pads=[3, 3, 3, 3])
    return g, x, y, N(torch.nn.functional.conv2d(T(x), (T(w) * T(s)).transpose(2, 3), padding=3))


@case("fold_where_greater_consts_add")
def _(name):
    import torch
    r = rng(name)
    x, c1, c2 = randn(r, 2, 3, 4, 5), randn(r, 4, 5), randn(r, 5)
    g = G()
    a, b = g.const(c1), g.cnode(c2)
    w = g.op("Where", [g.op("Greater", [a, b]), a, b])
    y = g.op("Add", ["x", w])
    return g, x, y, N(T(x) + torch.where(T(c1) > T(c2), T(c1), T(c2)))


@case("fold_shape_slice_concat_reshape")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    s = g.op("Slice", [g.op("Shape", ["x"]), g.i64([0]), g.i64([2])])
    shape = g.op("Concat", [s, g.i64([-1])], axis=0)
    y = g.op("Reshape", ["x", shape])
    return g, x, y, N(T(x).reshape(2, 3, 20))


@case("fold_tile_pad_trilu_const_add")
def _(name):
    import torch
    import torch.nn.functional as F
    r = rng(name)
    x, c = randn(r, 2, 3, 4, 5), randn(r, 2, 3)
    g = G(14)
    t = g.op("Tile", [g.const(c), g.i64([2, 1])])                    # [4, 3]
    p = g.op("Pad", [t, g.i64([0, 1, 0, 1]), g.const(np.array(3, np.float32))])   # [4, 5]
    u = g.op("Trilu", [p], upper=1)
    y = g.op("Add", ["x", u])
    want = torch.triu(F.pad(T(c).repeat(2, 1), (1, 1), value=3.0))
    return g, x, y, N(T(x) + want)


@case("fold_cast_mod_gather_const_add")
def _(name):
    import torch
    r = rng(name)
    x, table = randn(r, 2, 3, 4, 5), randn(r, 4, 5)
    g = G()
    i = g.op("Cast", [g.const(np.array([-1.7, 5.2, 2.9, -6.1], np.float32))], to=7)  # -1 5 2 -6
    m = g.op("Mod", [i, g.i64([4])])                                 # 3 1 2 2
    y = g.op("Add", ["x", g.op("Gather", [g.const(table), m], axis=0)])
    idx = torch.remainder(torch.tensor([-1, 5, 2, -6]), 4)
    return g, x, y, N(T(x) + T(table)[idx])


@case("fold_transpose_neg_step_slice_const_add")
def _(name):
    r = rng(name)
    x, c = randn(r, 2, 3, 4, 5), randn(r, 5, 8)
    g = G()
    tr = g.op("Transpose", [g.const(c)], perm=[1, 0])                # [8, 5]
    s = g.op("Slice", [tr, g.i64([INT64_MAX]), g.i64([INT64_MIN]), g.i64([0]), g.i64([-2])])
    y = g.op("Add", ["x", s])
    return g, x, y, N(T(x) + T(c).t().flip(0)[::2])


@case("fold_softmax_reduce_unary_consts_add")
def _(name):
    r = rng(name)
    x, c1, c2 = randn(r, 2, 3, 4, 5), randn(r, 4, 5), uniform(r, 0.5, 2, 4, 5)
    g = G()
    sm = g.op("Softmax", [g.const(c1)], axis=0)
    rs = g.op("ReduceSum", [g.op("Sqrt", [g.const(c2)]), g.i64([1])], keepdims=1)   # [4, 1]
    y = g.op("Add", ["x", g.op("Mul", [sm, g.op("Exp", [rs])])])
    want = T(c1).softmax(0) * T(c2).sqrt().sum(1, keepdim=True).exp()
    return g, x, y, N(T(x) + want)


# ---- Concat ----------------------------------------------------------------------------------

@case("concat_20_slices_last_axis")
def _(name):
    g, x = G(), randn(rng(name), 2, 3, 4, 5)
    parts, order = [], [(3 * k + 1) % 5 for k in range(20)]
    for k in order:
        parts.append(g.op("Slice", ["x", g.i64([k]), g.i64([k + 1]), g.i64([-1])]))
    y = g.op("Concat", parts, axis=-1)
    t = T(x)
    return g, x, y, N(torch_cat([t[..., k:k + 1] for k in order], -1))


@case("concat_18_x_and_consts_axis1")
def _(name):
    r = rng(name)
    x = randn(r, 2, 3, 4, 5)
    cs = [randn(r, 2, 1, 4, 5) for _ in range(9)]
    g = G()
    ins = []
    for c in cs:
        ins += ["x", g.const(c)]
    y = g.op("Concat", ins, axis=1)
    parts = []
    for c in cs:
        parts += [T(x), T(c)]
    return g, x, y, N(torch_cat(parts, 1))


@case("concat_of_constant_blocks_folds_into_a_mask")
def _(name):
    # 2-D and 3-D constant blocks joined on each axis, one of integers, then
    # compared and selected into a mask added to the input (folded at import)
    import torch
    r = rng(name)
    x = randn(r, 2, 4, 6)
    a, b = ints(r, 0, 2, 4, 2), ints(r, 0, 2, 4, 4)
    c, e = ints(r, 0, 2, 1, 4, 6), ints(r, 0, 2, 1, 4, 6)
    g = G()
    m2 = g.op("Concat", [g.const(a), g.const(b.astype(np.int64))], axis=-1)
    m3 = g.op("Concat", [g.const(c), g.const(e)], axis=0)
    same = g.op("Equal", [g.op("Cast", [m2], to=1), g.const(np.float32(1))])
    mask = g.op("Where", [same, g.const(np.float32(0)), g.const(np.float32(-3))])
    y = g.op("Add", [g.op("Add", ["x", mask]), m3])
    t2 = torch_cat([T(a), T(b)], -1)
    tm = torch.where(t2 == 1, torch.tensor(0.0), torch.tensor(-3.0))
    return g, x, y, N(T(x) + tm + torch_cat([T(c), T(e)], 0))


@case("concat_of_convs_channels_and_rows")
def _(name):
    # convolutions' outputs joined on channels (held NHWC, joined there) and
    # on rows, a join of mostly model-layout values beside them, each read
    # by another convolution
    import torch
    F = torch.nn.functional
    r = rng(name)
    x = randn(r, 1, 3, 6, 5)
    w = [randn(r, c, 3, 3, 3, scale=0.3) for c in (4, 2, 5)]
    w2, w3 = randn(r, 6, 11, 1, 1, scale=0.3), randn(r, 2, 4, 3, 3, scale=0.3)
    g = G()
    cs = [g.op("Conv", ["x", g.const(wk)], pads=[1, 1, 1, 1]) for wk in w]
    cc = g.op("Concat", cs, axis=1)
    a = g.op("Conv", [cc, g.const(w2)])
    rows = g.op("Concat", [cs[0], g.op("Relu", [cs[0]])], axis=2)
    b = g.op("Conv", [rows, g.const(w3)], pads=[1, 1, 1, 1])
    mixed = g.op("Concat", [g.op("Sigmoid", ["x"]), g.op("Tanh", ["x"]), cs[1]], axis=1)
    y = g.op("Concat", [g.op("Flatten", [a]), g.op("Flatten", [b]), g.op("Flatten", [mixed])], axis=1)
    t = T(x)
    tc = [F.conv2d(t, T(wk), padding=1) for wk in w]
    ta = F.conv2d(torch_cat(tc, 1), T(w2))
    tb = F.conv2d(torch_cat([tc[0], tc[0].relu()], 2), T(w3), padding=1)
    tm = torch_cat([t.sigmoid(), t.tanh(), tc[1]], 1)
    return g, x, y, N(torch_cat([ta.flatten(1), tb.flatten(1), tm.flatten(1)], 1))


def onnx_flat_cat(g, vals):
    """The values flattened to [1, -1] and joined: one output of several tensors."""
    return g.op("Concat", [g.op("Flatten", [v]) for v in vals], axis=1)


def torch_flat_cat(ts):
    return N(torch_cat([t.flatten(1) for t in ts], 1))


def onnx_shuffle(g, a, dims, groups):
    """ShuffleNet's channel shuffle of a as torchvision exports it."""
    n, c = dims[0], dims[1]
    r = g.op("Reshape", [a, g.i64([n, groups, c // groups] + list(dims[2:]))])
    t = g.op("Transpose", [r], perm=[0, 2, 1] + list(range(3, len(dims) + 1)))
    return g.op("Reshape", [t, g.i64(list(dims))])


def torch_shuffle(t, groups):
    n, c = t.shape[0], t.shape[1]
    return t.reshape(n, groups, c // groups, *t.shape[2:]).transpose(1, 2).reshape(t.shape)


@case("transpose_channel_shuffles_of_convs_and_of_inputs")
def _(name):
    # a shuffle between convolutions (held NHWC, shuffled there), one of
    # model-layout values (groups 3), and a reshape/transpose/reshape that
    # does not come back to its input's shape (no shuffle: left as it is)
    import torch
    F = torch.nn.functional
    r = rng(name)
    x = randn(r, 1, 3, 5, 4)
    w, w2 = randn(r, 6, 3, 3, 3, scale=0.3), randn(r, 4, 6, 1, 1, scale=0.3)
    g = G()
    a = g.op("Conv", ["x", g.const(w)], pads=[1, 1, 1, 1])
    b = g.op("Conv", [onnx_shuffle(g, a, [1, 6, 5, 4], 2), g.const(w2)])
    m = onnx_shuffle(g, g.op("Concat", ["x", g.op("Tanh", ["x"])], axis=1), [1, 6, 5, 4], 3)
    q = g.op("Reshape", [a, g.i64([1, 2, 3, 5, 4])])
    q = g.op("Reshape", [g.op("Transpose", [q], perm=[0, 2, 1, 3, 4]), g.i64([1, 6, 20])])
    y = onnx_flat_cat(g, (b, m, q))
    t = T(x)
    ta = F.conv2d(t, T(w), padding=1)
    tb = F.conv2d(torch_shuffle(ta, 2), T(w2))
    tm = torch_shuffle(torch_cat([t, t.tanh()], 1), 3)
    tq = ta.reshape(1, 2, 3, 5, 4).transpose(1, 2).reshape(1, 6, 20)
    return g, x, y, torch_flat_cat((tb, tm, tq))


@case("transpose_channels_last_and_back_around_convs")
def _(name):
    # ConvNeXt's block: a convolution's output permuted to channels-last, a
    # layer norm and a linear there, permuted back and added to the
    # convolution; a channels-first permute of a model-layout value read by
    # a convolution; a channels-last permute of the input itself
    import torch
    F = torch.nn.functional
    r = rng(name)
    x = randn(r, 1, 3, 6, 5)
    w, wl = randn(r, 8, 3, 3, 3, scale=0.4), randn(r, 8, 8, scale=0.4)
    w2, w3 = randn(r, 4, 8, 1, 1, scale=0.4), randn(r, 2, 5, 1, 1, scale=0.4)
    g = G(17)
    a = g.op("Conv", ["x", g.const(w)], pads=[1, 1, 1, 1])
    p = g.op("Transpose", [a], perm=[0, 2, 3, 1])
    ln = g.op("LayerNormalization", [p, g.const(np.ones(8, np.float32)),
                                     g.const(np.zeros(8, np.float32))], axis=-1)
    q = g.op("Transpose", [g.op("MatMul", [ln, g.const(wl)])], perm=[0, 3, 1, 2])
    c = g.op("Conv", [g.op("Add", [q, a]), g.const(w2)])
    e = g.op("Conv", [g.op("Transpose", [g.op("Tanh", ["x"])], perm=[0, 3, 1, 2]),
                      g.const(w3)])
    f = g.op("Transpose", ["x"], perm=[0, 2, 3, 1])
    y = onnx_flat_cat(g, (c, e, f))
    t = T(x)
    ta = F.conv2d(t, T(w), padding=1)
    tl = F.layer_norm(ta.permute(0, 2, 3, 1), (8,))
    tc = F.conv2d((tl @ T(wl)).permute(0, 3, 1, 2) + ta, T(w2))
    te = F.conv2d(t.tanh().permute(0, 3, 1, 2), T(w3))
    parts = (tc, te, t.permute(0, 2, 3, 1))
    return g, x, y, torch_flat_cat(parts)


@case("slice_of_nhwc_convs_in_memory_order")
def _(name):
    # slices and a split of a convolution's output (held NHWC, sliced in
    # memory order): channel halves, every third channel with every second
    # row and the columns reversed, a split; each read by a convolution or
    # a flatten
    import torch
    F = torch.nn.functional
    r = rng(name)
    x = randn(r, 1, 3, 6, 5)
    w, w2 = randn(r, 8, 3, 3, 3, scale=0.3), randn(r, 3, 4, 1, 1, scale=0.3)
    g = G()
    a = g.op("Conv", ["x", g.const(w)], pads=[1, 1, 1, 1])
    lo = g.op("Slice", [a, g.i64([0]), g.i64([4]), g.i64([1])])
    hi = g.op("Conv", [g.op("Slice", [a, g.i64([4]), g.i64([8]), g.i64([1])]), g.const(w2)])
    odd = g.op("Slice", [a, g.i64([1, 1, 4]), g.i64([8, 6, 0]), g.i64([1, 2, 3]),
                         g.i64([3, 2, -1])])
    s1, s2 = g.op("Split", [a, g.i64([3, 5])], nout=2, axis=1)
    y = onnx_flat_cat(g, (g.op("Relu", [lo]), hi, odd, s2, s1))
    t = F.conv2d(T(x), T(w), padding=1)
    th = F.conv2d(t[:, 4:8], T(w2))
    to = t[:, 1:8:3, 1:6:2, 1:5].flip(-1)
    parts = (t[:, 0:4].relu(), th, to, t[:, 3:8], t[:, 0:3])
    return g, x, y, torch_flat_cat(parts)


@case("unary_silu_of_convs_and_of_inputs")
def _(name):
    # x * Sigmoid(x) after a convolution (its epilogue), written the other way
    # round after another, and of the input (a step of its own);
    # x * Sigmoid(tanh(x)) is no silu
    import torch
    F = torch.nn.functional
    r = rng(name)
    x = randn(r, 1, 3, 5, 4, scale=2)
    w, w2 = randn(r, 6, 3, 3, 3, scale=0.5), randn(r, 6, 3, 1, 1, scale=0.5)
    g = G()
    a = g.op("Conv", ["x", g.const(w)], pads=[1, 1, 1, 1])
    sa = g.op("Mul", [a, g.op("Sigmoid", [a])])
    b = g.op("Conv", ["x", g.const(w2)])
    sb = g.op("Mul", [g.op("Sigmoid", [b]), b])
    sx = g.op("Mul", ["x", g.op("Sigmoid", ["x"])])
    mixed = g.op("Mul", ["x", g.op("Sigmoid", [g.op("Tanh", ["x"])])])
    y = onnx_flat_cat(g, (sa, sb, sx, mixed))
    t = T(x)
    ta, tb = F.conv2d(t, T(w), padding=1), F.conv2d(t, T(w2))
    parts = (F.silu(ta), F.silu(tb), F.silu(t), t * torch.sigmoid(torch.tanh(t)))
    return g, x, y, torch_flat_cat(parts)


@case("binary_broadcast_of_nhwc_convs")
def _(name):
    # a convolution's output (held NHWC) times a squeeze-excitation's
    # [1, C, 1, 1] scale, plus a [1, 1, H, W] map of another convolution,
    # and a model-layout value times an NHWC one
    import torch
    F = torch.nn.functional
    r = rng(name)
    x = randn(r, 1, 3, 5, 4)
    w, ws = randn(r, 6, 3, 3, 3, scale=0.4), randn(r, 6, 6, 1, 1, scale=0.4)
    wm = randn(r, 1, 3, 1, 1, scale=0.4)
    g = G()
    a = g.op("Conv", ["x", g.const(w)], pads=[1, 1, 1, 1])
    s = g.op("Sigmoid", [g.op("Conv", [g.op("GlobalAveragePool", [a]), g.const(ws)])])
    m = g.op("Conv", ["x", g.const(wm)])
    se = g.op("Add", [g.op("Mul", [a, s]), m])
    mixed = g.op("Mul", [g.op("Tanh", [g.op("Concat", ["x", "x"], axis=1)]), a])
    y = onnx_flat_cat(g, (se, mixed))
    t = T(x)
    ta = F.conv2d(t, T(w), padding=1)
    ts = torch.sigmoid(F.conv2d(ta.mean((2, 3), keepdim=True), T(ws)))
    tse = ta * ts + F.conv2d(t, T(wm))
    tm = torch.tanh(torch_cat([t, t], 1)) * ta
    return g, x, y, torch_flat_cat((tse, tm))


# ---- unsupported -----------------------------------------------------------------------------

def unsupported():
    from onnx import helper
    g, x = G(), randn(rng("unsupported"), 2, 3, 4, 5)
    g.extra_opsets = [helper.make_opsetid("com.example", 1)]
    r = g.op("Relu", ["x"], name="relu0")
    m = g.op("Frobnicate", [r], name="mystery", domain="com.example")
    y = g.op("Add", [m, "x"], name="add0")
    return g.model(x, x, y), x


# ---- main ------------------------------------------------------------------------------------

def main():
    if sys.argv[1:] == ["--list"]:
        for name, _ in CASES:
            print(name)
        return 0
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.stderr.write(__doc__)
        return 2
    import onnx
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, fn in CASES:
        try:
            g, x, last, y = fn(name)
            m = g.model(x, y, last)
        except Exception as e:
            raise RuntimeError("case %s: %s" % (name, e)) from e
        assert x.dtype == np.float32 and y.dtype == np.float32, name
        onnx.save(m, os.path.join(out, name + ".onnx"))
        np.save(os.path.join(out, name + ".x.npy"), x)
        np.save(os.path.join(out, name + ".y.npy"), y)
    m, x = unsupported()
    onnx.save(m, os.path.join(out, "unsupported.onnx"))
    np.save(os.path.join(out, "unsupported.x.npy"), x)
    return 0


if __name__ == "__main__":
    sys.exit(main())
