"""Makes the network the build suite runs: a small residual CNN in PyTorch
(conv + batch norm + relu, max pool, a residual block, a strided 1x1
downsample, global average pool, dense, softmax) with non-trivial batch-norm
statistics, exported to ONNX twice (batch norm kept, and folded by the
exporter), an input and PyTorch's output as .npy files; attn.onnx,
nn.MultiheadAttention's self-attention with a residual, with x_attn.npy and
y_attn.npy; and shuffle.onnx, torchvision's ShuffleNet v2 units (channel
halves, concats, channel shuffles), with x_shuffle.npy and y_shuffle.npy.

usage: make_small.py OUTDIR
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1, bias=True)
        self.bn3 = nn.BatchNorm2d(16)
        self.down = nn.Conv2d(16, 24, 1, stride=2, bias=False)
        self.bn4 = nn.BatchNorm2d(24)
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.pool(y)
        z = F.relu(self.bn2(self.conv2(y)))
        z = self.bn3(self.conv3(z))
        y = F.relu(z + y)
        y = F.relu(self.bn4(self.down(y)))
        y = torch.flatten(F.adaptive_avg_pool2d(y, 1), 1)
        return torch.softmax(self.fc(y), dim=1)


def main():
    out = sys.argv[1]
    torch.manual_seed(7)
    model = Small()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                # Negative gammas too: a fold must not assume positive scales.
                m.weight.copy_(torch.empty(n).uniform_(-1.5, 1.5))
                m.bias.copy_(torch.randn(n) * 0.5)
                m.running_mean.copy_(torch.randn(n) * 0.5)
                m.running_var.copy_(torch.empty(n).uniform_(0.5, 2.0))
    model.eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        y = model(x)
    np.save(os.path.join(out, "x.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(out, "y_ref.npy"), y.numpy().astype(np.float32))
    np.save(os.path.join(out, "x_bad_shape.npy"), np.zeros((1, 3, 32), np.float32))
    np.save(os.path.join(out, "x_int.npy"), np.zeros((1, 3, 32, 32), np.int64))
    kw = dict(input_names=["data"], output_names=["prob"])
    torch.onnx.export(model, x, os.path.join(out, "small.onnx"), opset_version=17, **kw)
    torch.onnx.export(model, x, os.path.join(out, "small_bn.onnx"), opset_version=11,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False, **kw)
    # small.onnx again with its weights in an external data file, as newer
    # PyTorch exporters write models (ONNX's data_location EXTERNAL).
    import onnx
    m = onnx.load(os.path.join(out, "small.onnx"))
    onnx.save_model(m, os.path.join(out, "small_ext.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="small_ext.weights", size_threshold=0)
    attention(out)
    shuffle_units(out)


class Attention(nn.Module):
    """nn.MultiheadAttention's self-attention and a residual: a packed q/k/v
    projection the importer splits into three dense layers."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x):
        return x + self.attn(x, x, x, need_weights=False)[0]


def export_with_io(out, name, model, x):
    """OUT/NAME.onnx (opset 17, input x, output y) with x_NAME.npy and
    PyTorch's output y_NAME.npy."""
    with torch.no_grad():
        y = model(x)
    np.save(os.path.join(out, "x_%s.npy" % name), x.numpy().astype(np.float32))
    np.save(os.path.join(out, "y_%s.npy" % name), y.numpy().astype(np.float32))
    # with autograd on: under no_grad nn.MultiheadAttention takes a fused
    # fast path the exporter cannot translate
    torch.onnx.export(model, x, os.path.join(out, name + ".onnx"), opset_version=17,
                      input_names=["x"], output_names=["y"])


def attention(out):
    torch.manual_seed(11)
    export_with_io(out, "attn", Attention().eval(), torch.randn(1, 10, 32))


def shuffle_units(out):
    """A stride-2 and a stride-1 ShuffleNet v2 unit, batch norms with
    non-trivial statistics."""
    from torchvision.models.shufflenetv2 import InvertedResidual
    torch.manual_seed(12)
    model = nn.Sequential(InvertedResidual(8, 16, 2), InvertedResidual(16, 16, 1))
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    export_with_io(out, "shuffle", model.eval(), torch.randn(1, 8, 10, 10))


if __name__ == "__main__":
    main()
