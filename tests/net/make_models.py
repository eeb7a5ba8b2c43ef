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
  block.onnx   a transformer encoder block (scaled Q, K, V projections,
               softmax attention, output projection + residual, layer norm,
               GELU feed-forward + residual, layer norm)
Hand-built with onnx.helper (python3-onnx):
  unsupported.onnx  conv + relu, then an operator ktune does not know in one
                    branch and a global pool in the other
  clip.onnx         conv + Clip(0, 6) (relu6) and conv + Clip(0, inf) (relu)
  group.onnx        a grouped convolution (group 2)
  symbolic.onnx     an input whose batch dimension is symbolic
  shapes.onnx       Shape/Gather/Unsqueeze/Concat/Reshape, Slice, Split, Squeeze
                    and an opset-11 Softmax over axis 1

Each model is written only when its library imports; OUTDIR/made lists the
files written. Exit status 77 when neither library is available. Both are test
dependencies (deploy/install-deps.sh): test_net.c fails every test whose model
is missing, with this script's output as the reason.
The equivalent network files are cnn.json, mobile.json and block.json next to
this script.
"""
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
    export(cnn, torch.randn(1, 3, 32, 32), "cnn.onnx")
    cnn.use_mean = True
    export(cnn, torch.randn(1, 3, 32, 32), "cnn_bn.onnx", opset=11,
           training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    export(Block(), torch.randn(1, 12, 64), "block.onnx")
    mobile = Mobile()
    for bn in (mobile.b1, mobile.b2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    export(mobile, torch.randn(1, 3, 32, 32), "mobile.onnx")

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

    save(helper.make_graph([
        helper.make_node("Conv", ["x", "w"], ["y1"], name="grouped", group=2),
    ], "group", [x], [y1], [weight("w", [8, 4, 3, 3])]), "group.onnx")

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

with open(os.path.join(out, "made"), "w") as f:
    f.write("\n".join(made) + "\n")
if reasons:
    print("; ".join(reasons))
sys.exit(77 if not made else 0)
