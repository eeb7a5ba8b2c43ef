"""PyTorch's side of bench_network: ResNet-18 (torchvision's architecture,
written out here: python3-torchvision is not needed) with random weights and
non-trivial batch-norm statistics, exported to ONNX for ktune, an input as
.npy, and eager PyTorch timed on one thread in NCHW and channels-last.

usage: network_torch.py OUTDIR BATCH REPEAT
prints: 'torch_nchw_ms M' and 'torch_channels_last_ms M' (medians)
"""
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet18(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.pool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, 1000)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def timed(model, x, repeat):
    with torch.no_grad():
        for _ in range(3):
            model(x)
        t = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            model(x)
            t.append(time.perf_counter() - t0)
    return float(np.median(t)) * 1e3


def main():
    out, batch, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = ResNet18()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    model.eval()
    x = torch.randn(batch, 3, 224, 224)
    np.save(os.path.join(out, "x.npy"), x.numpy())
    with torch.no_grad():
        np.save(os.path.join(out, "y_torch.npy"), model(x).numpy())
    torch.onnx.export(model, x, os.path.join(out, "resnet18.onnx"), opset_version=17,
                      input_names=["data"], output_names=["logits"])
    print("torch_nchw_ms %.4f" % timed(model, x, repeat), flush=True)
    cl = model.to(memory_format=torch.channels_last)
    print("torch_channels_last_ms %.4f" % timed(cl, x.to(memory_format=torch.channels_last),
                                                repeat), flush=True)


if __name__ == "__main__":
    main()
