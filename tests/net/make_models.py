"""Write the ONNX models test_net.c imports into OUTDIR.

From PyTorch (python3-torch), exported with torch.onnx.export, random weights:
  cnn.onnx     small CNN (conv + batch norm + relu, residual add, max pool,
               conv + bias + relu, global average pool, linear), eval mode,
               opset 17: the exporter folds the batch norms into the convolutions
  cnn_bn.onnx  the same CNN at opset 11 with its BatchNormalization nodes kept
               and the global pool written as a mean over H and W (ReduceMean)
  mobile.onnx  conv + batch norm + ReLU6, depthwise conv with channel
               multiplier 2 + batch norm + ReLU6, grouped conv + sigmoid, max
               pool + relu, conv + tanh, global average pool, linear (opset 17:
               batch norms folded, ReLU6 exported as Clip(0, 6))
  hard13.onnx, hard17.onnx  MobileNet-V3's activations: conv + batch norm +
               hardswish, a squeeze-excitation (global pool, conv + relu, conv +
               hardsigmoid, the product with its input), conv; opset 13 writes
               hardswish as x * HardSigmoid(x), opset 17 as HardSwish
  block.onnx   a transformer encoder block (scaled Q, K, V projections,
               softmax attention, output projection + residual, layer norm,
               GELU feed-forward + residual, layer norm)
  mha.onnx     nn.MultiheadAttention's self-attention: one packed q/k/v
               projection, sliced three ways
  shuffle.onnx torchvision's ShuffleNet v2 units (stride 2, then stride 1):
               channel halves, concats and channel shuffles
  mbconv.onnx  EfficientNet's block: SiLU (exported as x * Sigmoid(x)) after
               the 1x1 expansion, the depthwise 3x3 and the excitation's first
               1x1; the excitation's broadcast product; a residual
Hand-built with onnx.helper (python3-onnx):
  unsupported.onnx  conv + relu, then an operator ktune does not know in one
                    branch and a global pool in the other
  clip.onnx         conv + Clip(0, 6) (relu6) and conv + Clip(0, inf) (relu)
  group.onnx        a grouped convolution (group 2)
  constmask.onnx    a mask of constants (Concat of 2-D blocks, Equal, Where) added
                    to a convolution's output, as Swin builds its window mask
  pad0.onnx         conv, a Pad of nothing (as PyTorch writes before DenseNet's
                    average pools), a 2x2 average pool
  padpool.onnx      conv, a zero Pad of 1 on H and W, a 3x3 average pool (PyTorch's
                    avg_pool2d(padding=1) in Inception-v3)
  symbolic.onnx     an input whose batch dimension is symbolic
  shapes.onnx       Shape/Gather/Unsqueeze/Concat/Reshape, Slice, Split, Squeeze
                    and an opset-11 Softmax over axis 1
  params.onnx       known parameter values in every stored form the importer
                    converts: Conv with bias, BatchNormalization (epsilon
                    1e-3), Add / Mul / Div / Sub of constants, Gemm transB=0
                    with alpha and beta, Gemm transB=1 with a broadcast C, a
                    MatMul of a float16 constant through a Cast, LayerNormalization,
                    Gemm of two activations (alpha: a scale, beta * C: an add)
  external.onnx     a conv whose weight is stored in an external file (absent)
  ext_present.onnx  the same with its weight in ext_present.bin (offset 8, values
                    -1, -0.75, ..., 0.75), ext_escape.onnx with a location of ../
  short_raw.onnx, short_floats.onnx  a bias whose data is shorter than its shape
From PyTorch again:
  ln13.onnx    Linear then LayerNorm(eps=1e-6) at opset 13, where the exporter
               writes LayerNorm as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/
               Mul/Add, and a Linear with its one parameter shared (an Identity
               of it)
  masked.onnx  two inputs, x float [1, 6, 16] and mask int64 [1, 6]:
               x * (1 - mask) through Cast, Sub of a scalar constant, Unsqueeze
               and Mul, then a slice of the last axis and a ReduceSum

Expected parameter values, computed here with numpy in the canonical layouts
of net.h (kt_net_layer_param), go to MODEL.params.json for cnn_bn.onnx,
block.onnx and params.onnx: {"ops": [ops compared], "layers": [{"op", "name"
(optional), "eps" (optional), ROLE: [values]...}]} listing, in network order,
every layer whose op is in "ops"; a role not listed must be absent.

Each model is written only when its library imports; OUTDIR/made lists the
files written. Exit status 77 when neither library is available. Both are test
dependencies (deploy/install-deps.sh): test_net.c fails every test whose model
is missing, with this script's output as the reason.
The equivalent network files are cnn.json, mobile.json and block.json next to
this script.
"""
import json
import math
import os
import sys
import warnings

warnings.filterwarnings("ignore")  # tracer warnings about the constant q scale

out = sys.argv[1]
made = []
reasons = []

try:
    import torch
    import torch.nn as nn
except Exception as e:  # noqa: BLE001 - any import failure: its models are not made
    torch = None
    reasons.append("python3-torch is not importable (%s)" % e)

try:
    import onnx
    from onnx import TensorProto, helper
except Exception as e:  # noqa: BLE001
    onnx = None
    reasons.append("python3-onnx is not importable (%s)" % e)

if torch is not None:
    torch.manual_seed(0)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.use_mean = False
            self.c1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
            self.b1 = nn.BatchNorm2d(16)
            self.c2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
            self.b2 = nn.BatchNorm2d(16)
            self.c3 = nn.Conv2d(16, 32, 3, padding=1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = torch.relu(self.b2(self.c2(y)) + y)
            y = nn.functional.max_pool2d(y, 2)
            y = torch.relu(self.c3(y))
            if self.use_mean:
                y = y.mean((2, 3))  # exported as ReduceMean: a global average pool
            else:
                y = nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
            return self.fc(y)

    class Mobile(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
            self.b1 = nn.BatchNorm2d(16)
            self.dw = nn.Conv2d(16, 32, 3, padding=1, groups=16, bias=False)
            self.b2 = nn.BatchNorm2d(32)
            self.g = nn.Conv2d(32, 32, 3, padding=1, groups=4)
            self.c4 = nn.Conv2d(32, 16, 1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            y = nn.functional.relu6(self.b1(self.c1(x)))
            y = nn.functional.relu6(self.b2(self.dw(y)))
            y = torch.sigmoid(self.g(y))
            y = torch.relu(nn.functional.max_pool2d(y, 2))
            y = torch.tanh(self.c4(y))
            return self.fc(nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))

    class Hard(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
            self.b1 = nn.BatchNorm2d(16)
            self.se1 = nn.Conv2d(16, 8, 1)
            self.se2 = nn.Conv2d(8, 16, 1)
            self.c2 = nn.Conv2d(16, 8, 1)

        def forward(self, x):
            y = nn.functional.hardswish(self.b1(self.c1(x)))
            s = nn.functional.adaptive_avg_pool2d(y, 1)
            s = nn.functional.hardsigmoid(self.se2(torch.relu(self.se1(s))))
            return self.c2(y * s)

    class Block(nn.Module):
        def __init__(self, d=64, heads=4):
            super().__init__()
            self.heads = heads
            self.q = nn.Linear(d, d)
            self.k = nn.Linear(d, d)
            self.v = nn.Linear(d, d)
            self.o = nn.Linear(d, d)
            self.ln1 = nn.LayerNorm(d)
            self.f1 = nn.Linear(d, 4 * d)
            self.f2 = nn.Linear(4 * d, d)
            self.ln2 = nn.LayerNorm(d)
            self.act = nn.GELU()

        def forward(self, x):
            b, n, d = x.shape
            h = self.heads
            dh = d // h
            q = (self.q(x) * (1.0 / math.sqrt(dh))).reshape(b, n, h, dh).transpose(1, 2)
            k = self.k(x).reshape(b, n, h, dh).permute(0, 2, 3, 1)
            v = self.v(x).reshape(b, n, h, dh).transpose(1, 2)
            a = torch.softmax(q @ k, dim=-1)
            c = (a @ v).transpose(1, 2).reshape(b, n, d)
            x = self.ln1(x + self.o(c))
            return self.ln2(x + self.f2(self.act(self.f1(x))))

    def export(model, example, name, opset=17, **kw):
        model.eval()
        with torch.no_grad():
            torch.onnx.export(model, example, os.path.join(out, name), opset_version=opset,
                              input_names=["x"], output_names=["y"], **kw)
        made.append(name)

    cnn = CNN()
    for bn in (cnn.b1, cnn.b2):  # non-trivial statistics, as after training
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    export(cnn, torch.randn(1, 3, 32, 32), "cnn.onnx")
    cnn.use_mean = True
    export(cnn, torch.randn(1, 3, 32, 32), "cnn_bn.onnx", opset=11,
           training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)

    def vals(t):
        return [float(v) for v in t.detach().numpy().astype("float32").ravel()]

    def conv_params(c):
        e = {"op": "conv2d", "weight": vals(c.weight)}
        if c.bias is not None:
            e["bias"] = vals(c.bias)
        return e

    def bn_params(b):
        return {"op": "batch_norm", "gamma": vals(b.weight), "beta": vals(b.bias),
                "mean": vals(b.running_mean), "var": vals(b.running_var),
                "eps": float(torch.tensor(b.eps, dtype=torch.float32))}

    def write_params(name, ops, layers):
        with open(os.path.join(out, name), "w") as f:
            json.dump({"ops": ops, "layers": layers}, f)
        made.append(name)

    # The module's own tensors: the importer must return them as stored in
    # torch (nn.Linear's weight is [N, K] like dense's).
    write_params("cnn_bn.params.json", ["conv2d", "dense", "batch_norm"], [
        conv_params(cnn.c1), bn_params(cnn.b1), conv_params(cnn.c2), bn_params(cnn.b2),
        conv_params(cnn.c3),
        {"op": "dense", "weight": vals(cnn.fc.weight), "bias": vals(cnn.fc.bias)}])

    block = Block()
    with torch.no_grad():  # distinct layer norm parameters
        for ln in (block.ln1, block.ln2):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.uniform_(-0.5, 0.5)
    export(block, torch.randn(1, 12, 64), "block.onnx")

    class MHA(nn.Module):
        def __init__(self, d=32, heads=4):
            super().__init__()
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    # with autograd on: under no_grad the module takes a fused fast path the
    # exporter cannot translate
    torch.onnx.export(MHA().eval(), torch.randn(1, 10, 32), os.path.join(out, "mha.onnx"),
                      opset_version=17, input_names=["x"], output_names=["y"])
    made.append("mha.onnx")
    # torchvision's ShuffleNet v2 units: a stride-2 unit (both branches read
    # the input) and a stride-1 unit (the input split in two channel halves);
    # each ends with a concat and a channel shuffle of 2 groups
    try:
        from torchvision.models.shufflenetv2 import InvertedResidual
        export(nn.Sequential(InvertedResidual(16, 32, 2), InvertedResidual(32, 32, 1)),
               torch.randn(1, 16, 8, 8), "shuffle.onnx")
    except ImportError as e:
        reasons.append("python3-torchvision is not importable (%s)" % e)

    class MBConv(nn.Module):
        """EfficientNet's block: a 1x1 expansion and a depthwise 3x3, each with
        SiLU; a squeeze-excitation (global pool, 1x1 + SiLU, 1x1 + sigmoid,
        the product with its input); a 1x1 projection and the residual."""

        def __init__(self):
            super().__init__()
            self.e = nn.Conv2d(8, 32, 1)
            self.d = nn.Conv2d(32, 32, 3, padding=1, groups=32)
            self.s1, self.s2 = nn.Conv2d(32, 8, 1), nn.Conv2d(8, 32, 1)
            self.p = nn.Conv2d(32, 8, 1)

        def forward(self, x):
            F = nn.functional
            y = F.silu(self.d(F.silu(self.e(x))))
            s = torch.sigmoid(self.s2(F.silu(self.s1(F.adaptive_avg_pool2d(y, 1)))))
            return self.p(y * s) + x

    export(MBConv(), torch.randn(1, 8, 8, 8), "mbconv.onnx")
    # Linear layers on a 3-D input export as MatMul with the weight stored
    # transposed ([K, N]) plus an Add of the bias; q is scaled by 1/sqrt(16).
    lin = []
    for m in (block.q, block.k, block.v):
        lin.append({"op": "dense", "weight": vals(m.weight)})
        lin.append({"op": "bias_add", "value": vals(m.bias)})
        if m is block.q:
            lin.append({"op": "scale", "value": [0.25]})

    def ln_params(ln):
        return {"op": "layer_norm", "gamma": vals(ln.weight), "beta": vals(ln.bias),
                "eps": float(torch.tensor(ln.eps, dtype=torch.float32))}

    def dense_bias(m):
        return [{"op": "dense", "weight": vals(m.weight)},
                {"op": "bias_add", "value": vals(m.bias)}]

    write_params("block.params.json", ["dense", "bias_add", "scale", "layer_norm"],
                 lin + dense_bias(block.o) + [ln_params(block.ln1)] + dense_bias(block.f1) +
                 dense_bias(block.f2) + [ln_params(block.ln2)])
    mobile = Mobile()
    for bn in (mobile.b1, mobile.b2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    export(mobile, torch.randn(1, 3, 32, 32), "mobile.onnx")
    hard = Hard()
    hard.b1.running_mean.uniform_(-0.5, 0.5)
    hard.b1.running_var.uniform_(0.5, 2.0)
    export(hard, torch.randn(1, 3, 16, 16), "hard13.onnx", opset=13)
    export(hard, torch.randn(1, 3, 16, 16), "hard17.onnx", opset=17)

if onnx is not None:
    import random
    random.seed(0)

    def weight(name, dims):
        n = 1
        for d in dims:
            n *= d
        return helper.make_tensor(name, TensorProto.FLOAT, dims,
                                  [random.uniform(-1, 1) for _ in range(n)])

    def scalar(name, v):
        return helper.make_tensor(name, TensorProto.FLOAT, [], [v])

    def save(graph, name):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 7
        onnx.save(model, os.path.join(out, name))
        made.append(name)

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])
    y1 = helper.make_tensor_value_info("y1", TensorProto.FLOAT, None)
    y2 = helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)

    save(helper.make_graph([
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Hardmax", ["r"], ["h"], name="mystery", axis=1),
        helper.make_node("Relu", ["h"], ["y1"], name="after_mystery"),
        helper.make_node("GlobalAveragePool", ["r"], ["y2"], name="gap"),
    ], "unsupported", [x], [y1, y2], [weight("w", [8, 8, 3, 3])]), "unsupported.onnx")

    save(helper.make_graph([
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv_relu6"),
        helper.make_node("Clip", ["c1", "zero", "six"], ["y1"], name="relu6"),
        helper.make_node("Conv", ["x", "w2"], ["c2"], name="conv_clip_relu"),
        helper.make_node("Clip", ["c2", "zero"], ["y2"], name="clip_min0"),
    ], "clip", [x], [y1, y2], [weight("w1", [8, 8, 1, 1]), weight("b1", [8]),
                               weight("w2", [4, 8, 1, 1]), scalar("zero", 0.0),
                               scalar("six", 6.0)]), "clip.onnx")

    # Swin's way to a window mask: constant blocks joined, compared and
    # selected, then added to an activation; the mask folds at import
    save(helper.make_graph([
        helper.make_node("Concat", ["m1", "m2"], ["m"], name="join", axis=0),
        helper.make_node("Equal", ["m", "one"], ["e"], name="same"),
        helper.make_node("Where", ["e", "zero", "minus"], ["mask"], name="select"),
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Add", ["c", "mask"], ["y1"], name="masked"),
    ], "constmask", [x], [y1], [
        weight("w", [8, 8, 1, 1]), scalar("one", 1.0), scalar("zero", 0.0),
        scalar("minus", -100.0),
        helper.make_tensor("m1", TensorProto.FLOAT, [6, 16], [float(i % 3 == 0) for i in range(96)]),
        helper.make_tensor("m2", TensorProto.FLOAT, [10, 16], [float(i % 2) for i in range(160)])]),
        "constmask.onnx")

    save(helper.make_graph([
        helper.make_node("Conv", ["x", "w"], ["y1"], name="grouped", group=2),
    ], "group", [x], [y1], [weight("w", [8, 4, 3, 3])]), "group.onnx")

    save(helper.make_graph([
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Pad", ["c", "nothing"], ["p"], name="pad0", mode="constant"),
        helper.make_node("AveragePool", ["p"], ["y1"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
    ], "pad0", [x], [y1], [weight("w", [8, 8, 1, 1]),
                           helper.make_tensor("nothing", TensorProto.INT64, [8], [0] * 8)]),
         "pad0.onnx")
    save(helper.make_graph([
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Pad", ["c", "one"], ["p"], name="pad1", mode="constant"),
        helper.make_node("AveragePool", ["p"], ["y1"], name="pool", kernel_shape=[3, 3]),
    ], "padpool", [x], [y1], [weight("w", [8, 8, 1, 1]),
                              helper.make_tensor("one", TensorProto.INT64, [8],
                                                 [0, 0, 1, 1, 0, 0, 1, 1])]),
         "padpool.onnx")

    xs = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 16, 16])
    save(helper.make_graph([
        helper.make_node("Conv", ["x", "w"], ["y1"], name="conv"),
    ], "symbolic", [xs], [y1], [weight("w", [8, 8, 3, 3])]), "symbolic.onnx")

    # Shape arithmetic as exporters write it (opset 11 forms: axes and split
    # as attributes, Softmax over the input flattened at axis 1).
    def ints(name, vals):
        return helper.make_tensor(name, TensorProto.INT64, [len(vals)], vals)

    x3 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 8])
    y3 = helper.make_tensor_value_info("y3", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph([
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero_i"], ["batch"], name="batch", axis=0),
        helper.make_node("Unsqueeze", ["batch"], ["batch1"], name="batch1", axes=[0]),
        helper.make_node("Concat", ["batch1", "minus1"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="flat"),
        helper.make_node("MatMul", ["flat", "w"], ["y1"], name="proj"),
        helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["part"], name="part"),
        helper.make_node("Split", ["part"], ["s0", "s1"], name="split", axis=1, split=[2, 4]),
        helper.make_node("Softmax", ["s0"], ["y2"], name="softmax", axis=1),
        helper.make_node("Squeeze", ["s1"], ["y3"], name="squeeze", axes=[]),
    ], "shapes", [x3], [y1, y2, y3],
        [helper.make_tensor("zero_i", TensorProto.INT64, [], [0]),
         ints("minus1", [-1]), weight("w", [48, 10]), ints("starts", [4]),
         ints("ends", [2 ** 62]), ints("axes", [2])]),
        opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    onnx.save(model, os.path.join(out, "shapes.onnx"))
    made.append("shapes.onnx")

if onnx is not None:
    import numpy as np

    rng = np.random.default_rng(0)

    def arr(*dims):
        return rng.uniform(-1, 1, dims).astype(np.float32)

    def t_floats(name, a):   # float_data
        return helper.make_tensor(name, TensorProto.FLOAT, a.shape, a.ravel().tolist())

    def t_raw(name, a, dtype=TensorProto.FLOAT):   # raw_data
        return helper.make_tensor(name, dtype, a.shape, a.tobytes(), raw=True)

    def fl(a):
        return [float(v) for v in np.asarray(a, dtype=np.float32).ravel()]

    w_conv, b_conv = arr(3, 2, 1, 1), arr(3)
    gamma, beta = arr(3) + 2, arr(3)
    mean, var = arr(3), arr(3) + 1.5
    c_add = arr(3, 1, 1)
    c_div = np.array([2, 4, 0.3], np.float32).reshape(1, 3, 1, 1)
    c_full = arr(3, 4, 4)   # two non-1 dimensions: added as a tensor, negated
    c_sub = arr(3, 1, 1)
    w_t0, c_t0 = arr(48, 100), arr(100)   # 4,800 values: read from the tensor
    w_t1, c_t1 = arr(6, 100), np.array([0.75], np.float32)
    w_mm = arr(6, 3).astype(np.float16)
    ln_g, ln_b = arr(3), arr(3)
    c_g = arr(1, 2)
    nodes = [
        helper.make_node("Conv", ["x", "w_conv", "b_conv"], ["c"], name="conv"),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["b"],
                         name="bn", epsilon=1e-3),
        helper.make_node("Add", ["c_add", "b"], ["a"], name="addc"),
        helper.make_node("Mul", ["a", "two_half"], ["m"], name="mulc"),
        helper.make_node("Div", ["m", "c_div"], ["dv"], name="divc"),
        helper.make_node("Sub", ["dv", "c_full"], ["sf"], name="subfull"),
        helper.make_node("Sub", ["sf", "c_sub"], ["sv"], name="subc"),
        helper.make_node("Flatten", ["sv"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "w_t0", "c_t0"], ["g0"], name="gemm_t0", alpha=0.5,
                         beta=2.0),
        helper.make_node("Gemm", ["g0", "w_t1", "c_t1"], ["g1"], name="gemm_t1", transB=1),
        helper.make_node("Cast", ["w_mm16"], ["w_mm"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["g1", "w_mm"], ["mm"], name="mm"),
        helper.make_node("LayerNormalization", ["mm", "ln_g", "ln_b"], ["n"], name="ln",
                         epsilon=1e-4),
        # Both operands activations: a matmul, a scale by alpha and the add
        # of C times beta.
        helper.make_node("Gemm", ["n", "z", "c_g"], ["y"], name="gemm_act", alpha=0.5,
                         beta=3.0),
    ]
    inits = [t_raw("w_conv", w_conv), t_floats("b_conv", b_conv), t_raw("gamma", gamma),
             t_raw("beta", beta), t_floats("mean", mean), t_raw("var", var),
             t_raw("c_add", c_add), helper.make_tensor("two_half", TensorProto.FLOAT, [], [2.5]),
             t_floats("c_div", c_div), t_raw("c_full", c_full), t_raw("c_sub", c_sub),
             t_floats("w_t0", w_t0), t_raw("c_t0", c_t0), t_raw("w_t1", w_t1),
             t_floats("c_t1", c_t1), t_raw("w_mm16", w_mm, TensorProto.FLOAT16),
             t_raw("ln_g", ln_g), t_floats("ln_b", ln_b), t_raw("c_g", c_g)]
    xp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    zp = helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 2])
    yp = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(nodes, "params", [xp, zp], [yp], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, os.path.join(out, "params.onnx"))
    made.append("params.onnx")
    f32 = np.float32
    expect = [
        {"op": "input", "name": "x"},
        {"op": "input", "name": "z"},
        {"op": "conv2d", "name": "conv", "weight": fl(w_conv), "bias": fl(b_conv)},
        {"op": "batch_norm", "name": "bn", "gamma": fl(gamma), "beta": fl(beta),
         "mean": fl(mean), "var": fl(var), "eps": float(f32(1e-3))},
        {"op": "bias_add", "name": "addc", "value": fl(c_add)},
        {"op": "scale", "name": "mulc", "value": [2.5]},
        {"op": "scale", "name": "divc", "value": fl(1.0 / c_div.astype(np.float64))},
        {"op": "input", "name": "const:c_full*-1", "value": fl(-c_full)},
        {"op": "bias_add", "name": "subc", "value": fl(-c_sub)},
        # alpha (0.5) scales the [K, N] weight transposed to [N, K], beta the bias.
        {"op": "dense", "name": "gemm_t0", "weight": fl(f32(0.5) * w_t0.T),
         "bias": fl(f32(2.0) * c_t0)},
        {"op": "dense", "name": "gemm_t1", "weight": fl(w_t1), "bias": fl(np.repeat(c_t1, 6))},
        {"op": "dense", "name": "mm", "weight": fl(w_mm.astype(np.float32).T)},
        {"op": "layer_norm", "name": "ln", "gamma": fl(ln_g), "beta": fl(ln_b),
         "eps": float(f32(1e-4))},
        {"op": "scale", "name": "gemm_act", "value": [0.5]},
        {"op": "input", "name": "const:c_g*3", "value": fl(f32(3.0) * c_g)},
    ]
    with open(os.path.join(out, "params.params.json"), "w") as f:
        json.dump({"ops": ["input", "conv2d", "dense", "batch_norm", "bias_add", "scale",
                           "layer_norm"], "layers": expect}, f)
    made.append("params.params.json")

    # A weight in an external file: the model imports (tasks need shapes
    # only) but carries no values. Serialized directly: onnx.save would look
    # for the file.
    w_ext = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 2, 1, 1],
                        data_location=TensorProto.EXTERNAL)
    entry = w_ext.external_data.add()
    entry.key, entry.value = "location", "weights.bin"
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "external", [xp], [yp],
        [w_ext]), opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    with open(os.path.join(out, "external.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    made.append("external.onnx")

    # The same conv with its weight present in ext_present.bin, 8 bytes into
    # it (offset and length given), and one whose location leaves the model's
    # directory.
    w_vals = np.arange(8, dtype=np.float32) * 0.25 - 1.0
    with open(os.path.join(out, "ext_present.bin"), "wb") as f:
        f.write(b"\x7f" * 8 + w_vals.tobytes() + b"\x7f" * 4)
    for name, loc in (("ext_present.onnx", "ext_present.bin"),
                      ("ext_escape.onnx", "../ext_present.bin")):
        w_ext = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 2, 1, 1],
                            data_location=TensorProto.EXTERNAL)
        for key, value in (("location", loc), ("offset", "8"), ("length", "32")):
            entry = w_ext.external_data.add()
            entry.key, entry.value = key, value
        model = helper.make_model(helper.make_graph(
            [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "external", [xp], [yp],
            [w_ext]), opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        with open(os.path.join(out, name), "wb") as f:
            f.write(model.SerializeToString())
        made.append(name)

    # A conv bias with 3 of its 4 values, as raw_data and as float_data.
    for name, bias in (("short_raw.onnx", t_raw("b", arr(3))),
                       ("short_floats.onnx", t_floats("b", arr(3)))):
        bias.dims[:] = [4]
        model = helper.make_model(helper.make_graph(
            [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")], "short", [xp],
            [yp], [t_raw("w", arr(4, 2, 1, 1)), bias]),
            opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        with open(os.path.join(out, name), "wb") as f:
            f.write(model.SerializeToString())
        made.append(name)

if torch is not None and onnx is not None:
    class LN13(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 32)
            self.ln = nn.LayerNorm(32, eps=1e-6)

        def forward(self, x):
            return self.ln(self.fc(x))

    class Masked(nn.Module):
        def forward(self, x, mask):
            y = x * (1.0 - mask.float()).unsqueeze(-1)
            return y[:, :, 2:-3].sum(-1)

    with torch.no_grad():
        torch.onnx.export(LN13().eval(), torch.randn(1, 5, 16), os.path.join(out, "ln13.onnx"),
                          opset_version=13, input_names=["x"], output_names=["y"])
        made.append("ln13.onnx")
        torch.onnx.export(Masked(), (torch.randn(1, 6, 16), torch.ones(1, 6, dtype=torch.int64)),
                          os.path.join(out, "masked.onnx"), opset_version=13,
                          input_names=["x", "mask"], output_names=["y"])
        made.append("masked.onnx")

with open(os.path.join(out, "made"), "w") as f:
    f.write("\n".join(made) + "\n")
if reasons:
    print("; ".join(reasons))
sys.exit(77 if not made else 0)
