#!/usr/bin/python3
"""Makes the model zoo that ktune's ONNX importer is checked against.

For each model named on the command line this writes, in OUTDIR:

    MODEL-oOPSET.onnx    the model exported by torch.onnx.export at that opset
    MODEL.x.npy          its input (float32; int64 token ids for gpt_tokens)
    MODEL-oOPSET.y.npy   PyTorch's float32 output for that input (eval mode,
                         torch.no_grad)

A model of several inputs has one MODEL.NAME.npy per ONNX input NAME instead
of MODEL.x.npy (encoder_mask_input: MODEL.x.npy, float32 [1, 12, 32], and
MODEL.mask.npy, int64 [1, 12], 1 for a token and 0 for padding).

The models are torchvision's architectures (the CNNs, ViT, Swin, MaxViT) and
small transformers built from torch.nn, each with random weights: there is no
network access here, and ktune only has to compute what PyTorch computes, so
no pretrained weights are needed. Everything is kept small so that a model
builds and runs in seconds on a 2-core CPU: 10 classes, and the smallest
input each architecture accepts (see the notes beside each builder).

With --small, each model of the same name is instead the smallest
configuration of the same torchvision classes and blocks that still has the
family's distinctive operators (one block per stage, narrow channels, the
first stages only where a family has many; 32x32 to 75x75 inputs; see
SMALL_MODELS), for the unit tests (tests/test_zoo.c): its files are named
MODEL-small-oOPSET.onnx, MODEL-small.x.npy and MODEL-small-oOPSET.y.npy, so
they never clash with the full models' in one OUTDIR.

Batch norm layers get non-trivial statistics (random running mean and
variance, weight and bias) so that a wrong batch-norm fold shows in the
output; otherwise the weights are torchvision's default initialisation.
Everything is seeded: torch.manual_seed(0) before each model is built, and
the input comes from a torch.Generator seeded 1, so the files are the same
on every run. (Exceptions to the default init, where it would make the output
blind to most of the model: ViT's classifier, which torchvision
zero-initialises, and, in the small ConvNeXt, the layer scale, 1e-6 by
default, which scales each block's residual branch below float32's
resolution of the sum.)

usage: make_zoo.py [--small] OUTDIR OPSET MODEL [MODEL...]
       make_zoo.py [--small] --list     (the known model names, one per line)

A model that fails to export is reported on stderr as
`make_zoo: MODEL oOPSET: FAILED: <reason>`; the others are still written,
and the exit status is 1.
"""
import os
import sys
import traceback
from functools import partial

import numpy as np
import onnx
import torch
import torch.nn as nn
import torchvision
import torchvision.models as tvm

NUM_CLASSES = 10

# Shapes of the torch.nn transformers: batch 1, 16 positions, width 64
# (--small: 12 positions, width 32; use_small_transformers()).
SEQ, D_MODEL, VOCAB = 16, 64, 100


# ---- inputs -------------------------------------------------------------------------

def generator():
    """The input's own random stream, independent of the weights'."""
    return torch.Generator().manual_seed(1)


def image(size):
    """A [1, 3, size, size] float32 image batch of N(0, 1) noise."""
    return torch.randn(1, 3, size, size, generator=generator())


def sequence():
    """A [1, SEQ, D_MODEL] float32 batch of embeddings."""
    return torch.randn(1, SEQ, D_MODEL, generator=generator())


def tokens():
    """A [1, SEQ] int64 batch of token ids in [0, VOCAB)."""
    return torch.randint(0, VOCAB, (1, SEQ), generator=generator(), dtype=torch.int64)


# ---- torchvision models ----------------------------------------------------------------

def vision(ctor, size, **kwargs):
    """A builder for a torchvision constructor with 10 classes and a size x size input."""
    def build():
        return ctor(num_classes=NUM_CLASSES, **kwargs), image(size)
    return build


def build_vit():
    # 32x32 in 8x8 patches: 16 tokens plus the class token.
    model = tvm.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                  hidden_dim=64, mlp_dim=128, num_classes=NUM_CLASSES)
    # torchvision zero-initialises the classifier, which would make the output
    # all zeros whatever came before it: give it nn.Linear's default init.
    model.heads.head.reset_parameters()
    return model, image(32)


def build_swin():
    # 64x64 in 4x4 patches: a 16x16 grid of 4x4 windows, 8x8 after the patch merge.
    model = tvm.swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2],
                                                 num_heads=[2, 4], window_size=[4, 4],
                                                 num_classes=NUM_CLASSES)
    return model, image(64)


def build_maxvit():
    # The stem halves 64x64 to 32x32 and each of the two stages halves it
    # again (16x16, then 8x8): a partition size of 4 divides both grids.
    model = tvm.MaxVit(input_size=(64, 64), stem_channels=16, partition_size=4,
                       block_channels=[32, 64], block_layers=[1, 1], head_dim=16,
                       stochastic_depth_prob=0.0, num_classes=NUM_CLASSES)
    return model, image(64)


# ---- the small torchvision models (--small) --------------------------------------------
#
# The same classes and blocks as the full models, at the smallest configuration
# that keeps what the family computes differently from the others. Where a
# class hard-codes its channels or depth (AlexNet, VGG's classifier,
# GoogLeNet, Inception v3, SqueezeNet, MNASNet) modules are replaced after
# construction, as each builder says; a replacement has its own class's
# default init (SqueezeNet's final conv: SqueezeNet's init of it).

def small_resnet(block, **kwargs):
    """One block per stage: ResNet-18's BasicBlock, ResNet-50's Bottleneck,
    grouped for ResNeXt, twice as wide inside for Wide ResNet."""
    def build():
        model = tvm.resnet.ResNet(block, [1, 1, 1, 1], num_classes=NUM_CLASSES, **kwargs)
        return model, image(32)
    return build


def build_small_alexnet():
    # AlexNet's features are fixed: 64x64 leaves a 1x1 map after the last max
    # pool (11x11 stride-4 conv, 3x3 stride-2 pools). Replaced after
    # construction: the 6x6 adaptive pool (which the exporter cannot make
    # from a 1x1 map) by a 1x1 one, and the 9216-4096-4096 classifier by the
    # same layers 256-64-64.
    model = tvm.AlexNet(num_classes=NUM_CLASSES)
    model.avgpool = nn.AdaptiveAvgPool2d((1, 1))
    model.classifier = nn.Sequential(
        nn.Dropout(p=0.5), nn.Linear(256, 64), nn.ReLU(inplace=True),
        nn.Dropout(p=0.5), nn.Linear(64, 64), nn.ReLU(inplace=True),
        nn.Linear(64, NUM_CLASSES))
    return model, image(64)


def build_small_vgg11():
    # VGG-11's configuration "A" (8 convolutions, 5 max pools) at an eighth of
    # its widths; 64x64 leaves a 2x2 map. Replaced after construction: the
    # 7x7 adaptive pool by a 1x1 one (it divides 2x2: a real average), and the
    # 25088-4096-4096 classifier by the same layers 64-64-64.
    cfg = [8, "M", 16, "M", 32, 32, "M", 64, 64, "M", 64, 64, "M"]
    model = tvm.VGG(tvm.vgg.make_layers(cfg, batch_norm=False), num_classes=NUM_CLASSES)
    model.avgpool = nn.AdaptiveAvgPool2d((1, 1))
    model.classifier = nn.Sequential(
        nn.Linear(64, 64), nn.ReLU(True), nn.Dropout(p=0.5),
        nn.Linear(64, 64), nn.ReLU(True), nn.Dropout(p=0.5),
        nn.Linear(64, NUM_CLASSES))
    return model, image(64)


def build_small_convnext():
    # Two stages of one CNBlock (7x7 depthwise conv, LayerNorm over channels,
    # GELU MLP, layer scale) with the 2x2 stride-2 downsample between them:
    # 32x32 is 8x8 after the 4x4 patch stem, then 4x4. The layer scale is 0.5
    # instead of 1e-6 (see the module's docstring): at 1e-6 the blocks would
    # not show in the output.
    setting = [tvm.convnext.CNBlockConfig(16, 32, 1), tvm.convnext.CNBlockConfig(32, None, 1)]
    model = tvm.convnext.ConvNeXt(setting, stochastic_depth_prob=0.0, layer_scale=0.5,
                                  num_classes=NUM_CLASSES)
    return model, image(32)


def build_small_densenet():
    # Two dense blocks and the transition between them (1x1 conv, 2x2 average
    # pool). The first block has 17 layers, so its last concatenation joins
    # 18 inputs (a Concat of more than 16); growth 4 keeps it narrow.
    model = tvm.DenseNet(growth_rate=4, block_config=(17, 2), num_init_features=16,
                         bn_size=2, num_classes=NUM_CLASSES)
    return model, image(32)


def build_small_efficientnet_b0():
    # B0's first stage (expand ratio 1, no expansion conv) and a 5x5 stage of
    # two MBConvs (the second with its residual), all with squeeze-excitation
    # (SiLU, sigmoid gate).
    mb = tvm.efficientnet.MBConvConfig
    setting = [mb(1, 3, 1, 16, 8, 1), mb(6, 5, 2, 8, 16, 2)]
    model = tvm.efficientnet.EfficientNet(setting, dropout=0.2, num_classes=NUM_CLASSES,
                                          last_channel=64)
    return model, image(32)


def build_small_efficientnet_v2_s():
    # V2-S's kinds of stage: FusedMBConv without expansion (and its
    # residual), FusedMBConv with expansion, an MBConv with squeeze-excitation;
    # V2's batch norm eps 1e-3, as torchvision's efficientnet_v2_s has it.
    fused, mb = tvm.efficientnet.FusedMBConvConfig, tvm.efficientnet.MBConvConfig
    setting = [fused(1, 3, 1, 8, 8, 2), fused(4, 3, 2, 8, 16, 1), mb(4, 3, 2, 16, 24, 2)]
    model = tvm.efficientnet.EfficientNet(setting, dropout=0.2, num_classes=NUM_CLASSES,
                                          norm_layer=partial(nn.BatchNorm2d, eps=1e-03),
                                          last_channel=64)
    return model, image(32)


def build_small_googlenet():
    # GoogLeNet hard-codes its channels: the stem (7x7 stride-2 conv, ceil-mode
    # max pools) and the inception blocks 3a and 3b (four branches
    # concatenated) are kept; replaced after construction by nn.Identity:
    # inception 4a to 5b; the classifier by a Linear from 3b's 480 channels.
    # 32x32 is 4x4 at 3a and 3b, 1x1 after the last two pools.
    model = tvm.GoogLeNet(num_classes=NUM_CLASSES, aux_logits=False, transform_input=False,
                          init_weights=False)
    for name in ("inception4a", "inception4b", "inception4c", "inception4d", "inception4e",
                 "inception5a", "inception5b"):
        setattr(model, name, nn.Identity())
    model.fc = nn.Linear(480, NUM_CLASSES)
    return model, image(32)


def build_small_inception_v3():
    # Inception v3 hard-codes its channels: one block of each kind is kept
    # (InceptionA, 6a: InceptionB, 6b: InceptionC with its 1x7 and 7x1 convs,
    # 7a: InceptionD, 7b: InceptionE with its split 1x3 / 3x1 branches).
    # Replaced after construction: Mixed_5b by the InceptionA of Mixed_5c's
    # configuration (pool features 64, so it gives 6a its 288 channels), and
    # Mixed_5c, 5d, 6c, 6d, 6e and 7c by nn.Identity (each of those maps its
    # input's shape to itself). 75x75, the smallest input it takes, is 7x7 at
    # Mixed_5b and 1x1 at 7b.
    model = tvm.Inception3(num_classes=NUM_CLASSES, aux_logits=False, transform_input=False,
                           init_weights=False)
    model.Mixed_5b = tvm.inception.InceptionA(192, pool_features=64)
    for name in ("Mixed_5c", "Mixed_5d", "Mixed_6c", "Mixed_6d", "Mixed_6e", "Mixed_7c"):
        setattr(model, name, nn.Identity())
    return model, image(75)


def build_small_mnasnet():
    # MNASNet at width 0.25, with its six stacks of inverted residuals cut to
    # one block each but the 5x5 ones (two blocks, so one has its residual);
    # the stem, the kernel sizes, strides and expansions are MNASNet 1.0's.
    # model.layers is rebuilt after construction from torchvision's _stack.
    model = tvm.MNASNet(0.25, num_classes=NUM_CLASSES)
    d = tvm.mnasnet._get_depths(0.25)
    m = tvm.mnasnet._BN_MOMENTUM
    stacks = [
        tvm.mnasnet._stack(d[1], d[2], 3, 2, 3, 1, m),
        tvm.mnasnet._stack(d[2], d[3], 5, 2, 3, 2, m),
        tvm.mnasnet._stack(d[3], d[4], 5, 2, 6, 1, m),
        tvm.mnasnet._stack(d[4], d[5], 3, 1, 6, 1, m),
        tvm.mnasnet._stack(d[5], d[6], 5, 2, 6, 1, m),
        tvm.mnasnet._stack(d[6], d[7], 3, 1, 6, 1, m),
    ]
    layers = list(model.layers)
    model.layers = nn.Sequential(*(layers[:8] + stacks + layers[14:]))
    return model, image(32)


def build_small_mobilenet_v2():
    # Three stages of MobileNetV2's inverted residuals (expansion 1, then 6;
    # a residual in the repeated one) at half width.
    setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 1, 2]]
    model = tvm.MobileNetV2(num_classes=NUM_CLASSES, width_mult=0.5,
                            inverted_residual_setting=setting)
    return model, image(32)


def small_mobilenet_v3(arch, keep):
    """The blocks `keep` (indices into torchvision's setting for arch, each
    block's input the previous one's output) at full width: ReLU and
    hard-swish blocks, with and without squeeze-excitation (hard sigmoid),
    3x3 and 5x5 depthwise convs, residuals."""
    def build():
        setting, _ = tvm.mobilenetv3._mobilenet_v3_conf(arch)
        model = tvm.MobileNetV3([setting[i] for i in keep], last_channel=128,
                                num_classes=NUM_CLASSES)
        return model, image(32)
    return build


def build_small_regnet(se_ratio):
    """Two stages of one RegNet bottleneck each (grouped 3x3 conv, group width
    8), with squeeze-excitation for RegNetY."""
    def build():
        params = tvm.regnet.BlockParams(depths=[1, 1], widths=[16, 32], group_widths=[8, 8],
                                        bottleneck_multipliers=[1.0, 1.0], strides=[2, 2],
                                        se_ratio=se_ratio)
        model = tvm.RegNet(params, num_classes=NUM_CLASSES, stem_width=16)
        return model, image(32)
    return build


def build_small_shufflenet():
    # Three stages (two units in the first, so one stride-1 unit splits its
    # channels) with the channel shuffle, at a sixth of x1.0's widths.
    model = tvm.ShuffleNetV2([2, 1, 1], [8, 16, 32, 64, 128], num_classes=NUM_CLASSES)
    return model, image(32)


def build_small_squeezenet():
    # SqueezeNet 1.1 hard-codes its channels: its first four Fire modules
    # (squeeze 1x1, expand 1x1 and 3x3 concatenated) and the ceil-mode max
    # pools between them are kept; replaced after construction: the features
    # by those first 8 modules, and the classifier's final 1x1 conv by one
    # from their 256 channels, initialised as SqueezeNet initialises its own
    # (N(0, 0.01), bias 0). 64x64 leaves 15x15, then 7x7 maps.
    model = tvm.SqueezeNet("1_1", num_classes=NUM_CLASSES)
    model.features = model.features[:8]
    final_conv = nn.Conv2d(256, NUM_CLASSES, kernel_size=1)
    nn.init.normal_(final_conv.weight, mean=0.0, std=0.01)
    nn.init.constant_(final_conv.bias, 0)
    model.classifier[1] = final_conv
    return model, image(64)


def build_small_vit():
    # 32x32 in 8x8 patches: 16 tokens plus the class token, one layer of width 32.
    model = tvm.VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=2,
                                  hidden_dim=32, mlp_dim=64, num_classes=NUM_CLASSES)
    model.heads.head.reset_parameters()  # zero-initialised by torchvision (see build_vit)
    return model, image(32)


def build_small_swin():
    # 32x32 in 4x4 patches: an 8x8 grid of 4x4 windows (the second block
    # shifted), then, after the patch merge, one 4x4 window (no shift then).
    model = tvm.swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 1],
                                                 num_heads=[2, 2], window_size=[4, 4],
                                                 num_classes=NUM_CLASSES)
    return model, image(32)


def build_small_maxvit():
    # One stage of one MaxVit layer (MBConv with squeeze-excitation, then
    # window and grid attention with relative position bias): the stem halves
    # 32x32 to 16x16 and the stage halves it again, to 8x8, which a partition
    # size of 4 divides (2x2 windows, a 2x2 grid).
    model = tvm.MaxVit(input_size=(32, 32), stem_channels=8, partition_size=4,
                       block_channels=[16], block_layers=[1], head_dim=8,
                       stochastic_depth_prob=0.0, num_classes=NUM_CLASSES)
    return model, image(32)


# ---- torch.nn transformers -----------------------------------------------------------------

def use_small_transformers():
    """--small: the transformers' shapes become 12 positions of width 32, 50 tokens."""
    global SEQ, D_MODEL, VOCAB
    SEQ, D_MODEL, VOCAB = 12, 32, 50


def encoder_stack(activation, norm_first=False, dim_feedforward=None, d_model=None):
    """Two batch-first encoder layers of width D_MODEL (or d_model), 4 heads,
    no dropout; the feed-forward 2 * width unless dim_feedforward says."""
    d_model = d_model or D_MODEL
    layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=4,
                                       dim_feedforward=dim_feedforward or 2 * d_model,
                                       dropout=0.0, batch_first=True, activation=activation,
                                       norm_first=norm_first)
    return nn.TransformerEncoder(layer, num_layers=2)


class Encoder(nn.Module):
    """A transformer encoder and a final LayerNorm, optionally with a fixed
    additive attention mask (a buffer, so the export has it as a constant)."""

    def __init__(self, activation="gelu", norm_first=False, mask=None):
        super().__init__()
        self.encoder = encoder_stack(activation, norm_first)
        self.norm = nn.LayerNorm(D_MODEL)
        if mask is not None:
            self.register_buffer("mask", mask)
        else:
            self.mask = None

    def forward(self, x):
        return self.norm(self.encoder(x, mask=self.mask))


def padding_mask():
    """[SEQ, SEQ] additive mask hiding the last 4 key positions from every query.
    A large negative rather than -inf, so no row is all -inf (NaN)."""
    mask = torch.zeros(SEQ, SEQ)
    mask[:, -4:] = -1e4
    return mask


class Decoder(nn.Module):
    """A GPT-2-style decoder: learned position embeddings, two pre-norm
    encoder layers under a causal mask, a final LayerNorm and a projection to
    VOCAB logits. With embed set, the input is token ids through an embedding
    table; otherwise it is the embeddings themselves."""

    def __init__(self, embed=False):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL) if embed else None
        self.pos = nn.Parameter(torch.randn(SEQ, D_MODEL) * 0.02)
        self.layers = encoder_stack("gelu", norm_first=True, dim_feedforward=4 * D_MODEL)
        self.norm = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        x = x + self.pos
        # The causal mask is computed here from constants only, so the
        # exporter folds it (or leaves a subgraph of constants).
        causal = torch.triu(torch.full((SEQ, SEQ), float("-inf")), diagonal=1)
        return self.head(self.norm(self.layers(x, mask=causal)))


def build_encoder():
    return Encoder("gelu"), sequence()


def build_encoder_relu():
    return Encoder("relu", norm_first=True), sequence()


def build_encoder_mask():
    return Encoder("gelu", mask=padding_mask()), sequence()


def build_decoder_causal():
    return Decoder(embed=False), sequence()


def build_gpt_tokens():
    return Decoder(embed=True), tokens()


class EncoderMaskInput(nn.Module):
    """Two batch-first encoder layers (width 32, 4 heads, GELU) whose
    attention mask is a second input, as a BERT-style model takes it: mask
    [1, 12] int64, 1 for a token and 0 for padding. The additive mask is
    built from it here: -1e4 on every padded key position, for each head."""

    HEADS = 4

    def __init__(self):
        super().__init__()
        self.encoder = encoder_stack("gelu", d_model=32)

    def forward(self, x, mask):
        n, s = mask.shape
        add = (1.0 - mask.float())[:, None, None, :] * -1e4           # [n, 1, 1, s]
        add = add.expand(n, self.HEADS, s, s).reshape(n * self.HEADS, s, s)
        return self.encoder(x, mask=add)


def build_encoder_mask_input():
    """x [1, 12, 32] float32 and mask [1, 12] int64 with its last 3 positions padding."""
    x = torch.randn(1, 12, 32, generator=generator())
    mask = torch.ones(1, 12, dtype=torch.int64)
    mask[:, -3:] = 0
    return EncoderMaskInput(), {"x": x, "mask": mask}


# ---- the zoo -------------------------------------------------------------------------------

# NAME -> builder returning (model, example_input): a tensor (the ONNX input
# "x") or a dict of ONNX input name -> tensor, in the forward's order. Sizes:
# the smallest input each architecture takes. AlexNet and VGG end in a
# fixed-size adaptive average pool (6x6, 7x7), which the ONNX exporter
# supports only when the feature map is a multiple of that size: 224x224 is
# their smallest input. Inception v3 needs 75x75; the rest run at 64x64.
MODELS = {
    "alexnet": vision(tvm.alexnet, 224),
    "convnext_tiny": vision(tvm.convnext_tiny, 64),
    "densenet121": vision(tvm.densenet121, 64),
    "efficientnet_b0": vision(tvm.efficientnet_b0, 64),
    "efficientnet_v2_s": vision(tvm.efficientnet_v2_s, 64),
    "googlenet": vision(tvm.googlenet, 64, aux_logits=False, init_weights=False),
    "inception_v3": vision(tvm.inception_v3, 75, aux_logits=False, init_weights=False),
    "mnasnet1_0": vision(tvm.mnasnet1_0, 64),
    "mobilenet_v2": vision(tvm.mobilenet_v2, 64),
    "mobilenet_v3_small": vision(tvm.mobilenet_v3_small, 64),
    "mobilenet_v3_large": vision(tvm.mobilenet_v3_large, 64),
    "regnet_x_400mf": vision(tvm.regnet_x_400mf, 64),
    "regnet_y_400mf": vision(tvm.regnet_y_400mf, 64),
    "resnet18": vision(tvm.resnet18, 64),
    "resnet50": vision(tvm.resnet50, 64),
    "resnext50_32x4d": vision(tvm.resnext50_32x4d, 64),
    "wide_resnet50_2": vision(tvm.wide_resnet50_2, 64),
    "shufflenet_v2_x1_0": vision(tvm.shufflenet_v2_x1_0, 64),
    "squeezenet1_1": vision(tvm.squeezenet1_1, 64),
    "vgg11": vision(tvm.vgg11, 224),
    "vit": build_vit,
    "swin": build_swin,
    "encoder": build_encoder,
    "encoder_relu": build_encoder_relu,
    "encoder_mask": build_encoder_mask,
    "decoder_causal": build_decoder_causal,
    "gpt_tokens": build_gpt_tokens,
    "encoder_mask_input": build_encoder_mask_input,
}
# MaxViT came with torchvision 0.14; leave it out where it is missing.
if hasattr(tvm, "MaxVit"):
    MODELS["maxvit"] = build_maxvit

# --small: the same names, each the smallest configuration of its family (the
# builders above). The transformers are MODELS' at 12 positions of width 32
# (use_small_transformers); encoder_mask_input is small already.
SMALL_MODELS = {
    "alexnet": build_small_alexnet,
    "convnext_tiny": build_small_convnext,
    "densenet121": build_small_densenet,
    "efficientnet_b0": build_small_efficientnet_b0,
    "efficientnet_v2_s": build_small_efficientnet_v2_s,
    "googlenet": build_small_googlenet,
    "inception_v3": build_small_inception_v3,
    "mnasnet1_0": build_small_mnasnet,
    "mobilenet_v2": build_small_mobilenet_v2,
    # Small: the SE + ReLU stride-2 block without an expansion conv, a ReLU
    # block, the 5x5 hard-swish blocks with SE (the second with its residual).
    "mobilenet_v3_small": small_mobilenet_v3("mobilenet_v3_small", [0, 1, 3, 4]),
    # Large: the block without an expansion conv (and its residual), a ReLU
    # block, a 5x5 ReLU block with SE, a hard-swish block without.
    "mobilenet_v3_large": small_mobilenet_v3("mobilenet_v3_large", [0, 1, 3, 6]),
    "regnet_x_400mf": build_small_regnet(None),
    "regnet_y_400mf": build_small_regnet(0.25),
    "resnet18": small_resnet(tvm.resnet.BasicBlock),
    "resnet50": small_resnet(tvm.resnet.Bottleneck),
    "resnext50_32x4d": small_resnet(tvm.resnet.Bottleneck, groups=32, width_per_group=4),
    "wide_resnet50_2": small_resnet(tvm.resnet.Bottleneck, width_per_group=64 * 2),
    "shufflenet_v2_x1_0": build_small_shufflenet,
    "squeezenet1_1": build_small_squeezenet,
    "vgg11": build_small_vgg11,
    "vit": build_small_vit,
    "swin": build_small_swin,
    "encoder": build_encoder,
    "encoder_relu": build_encoder_relu,
    "encoder_mask": build_encoder_mask,
    "decoder_causal": build_decoder_causal,
    "gpt_tokens": build_gpt_tokens,
    "encoder_mask_input": build_encoder_mask_input,
}
if hasattr(tvm, "MaxVit"):
    SMALL_MODELS["maxvit"] = build_small_maxvit
assert list(SMALL_MODELS) == list(MODELS), "--small must have the same model names"


def randomize_batch_norms(model):
    """Give every batch norm layer statistics and an affine transform far from
    the identity, drawn from the (seeded) global random stream."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n) * 0.5)
                m.running_var.copy_(torch.empty(n).uniform_(0.5, 2.0))
                if m.affine:
                    m.weight.copy_(torch.empty(n).uniform_(0.5, 1.5))
                    m.bias.copy_(torch.randn(n) * 0.5)


def make(name, outdir, opset, small=False):
    """Build, run and export one model into outdir (its --small form if small)."""
    torch.manual_seed(0)
    model, x = (SMALL_MODELS if small else MODELS)[name]()
    inputs = x if isinstance(x, dict) else {"x": x}
    args = tuple(inputs.values())
    randomize_batch_norms(model)
    model.eval()
    with torch.no_grad():
        y = model(*args)
    assert isinstance(y, torch.Tensor), f"{name}: output is a {type(y).__name__}, not a tensor"

    # Exported with autograd on: under no_grad, nn.TransformerEncoderLayer
    # takes its fused fast path (torch._transformer_encoder_layer_fwd), which
    # the ONNX exporter cannot translate. The traced computation is the same.
    stem = f"{name}-small" if small else name
    path = os.path.join(outdir, f"{stem}-o{opset}.onnx")
    torch.onnx.export(model, args, path, opset_version=opset, do_constant_folding=True,
                      input_names=list(inputs), output_names=["y"])
    onnx.checker.check_model(path)

    for input_name, value in inputs.items():
        np.save(os.path.join(outdir, f"{stem}.{input_name}.npy"), value.numpy())
    np.save(os.path.join(outdir, f"{stem}-o{opset}.y.npy"), y.numpy().astype(np.float32))


def main(argv):
    args = argv[1:]
    small = bool(args) and args[0] == "--small"
    if small:
        args = args[1:]
        use_small_transformers()
    if args == ["--list"]:
        print("\n".join(SMALL_MODELS if small else MODELS))
        return 0
    if len(args) < 3 or args[0].startswith("-"):
        sys.stderr.write(__doc__)
        return 2
    outdir, opset, names = args[0], int(args[1]), args[2:]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        sys.stderr.write(f"make_zoo: unknown model(s): {' '.join(unknown)} (see --list)\n")
        return 2
    os.makedirs(outdir, exist_ok=True)
    failed = 0
    for name in names:
        try:
            make(name, outdir, opset, small)
            print(f"make_zoo: {name} o{opset}: written", flush=True)
        except Exception as e:  # one model's failure must not stop the others
            failed += 1
            traceback.print_exc()
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            sys.stderr.write(f"make_zoo: {name} o{opset}: FAILED: {type(e).__name__}: {reason}\n")
            sys.stderr.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
