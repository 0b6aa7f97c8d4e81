"""Gavel's job kinds as layer lists, their predicted step times, and the transfer to new GPUs.

Each kind of the built-in catalog (``resnet18/bs16`` … ``cyclegan``; docs/throughputs.md) is
the training step Gavel ran (``stanford-futuredata/gavel``, ``scheduler/job_table.py`` @
``1a57defe04986b47e06b9a51a035239cb56e7030`` for the commands, ``workloads/pytorch/`` for the
code), written out layer by layer from the architecture as published and priced by the
per-layer roofline of ``apportion.perf.layers``. Where each architecture comes from is in
``ARCHITECTURES``; the assumptions that no source fixes are module constants marked
"assumed". Gavel measured FP32 PyTorch, so every kind runs at each GPU's FP32 peak on its
CUDA cores: no tensor cores, no TF32, no mixed precision.

The absolute step times are not the point: the host-side work these scripts do (Python, data
loading, an Atari emulator, a CPU optimizer) is not modelled. What the catalog uses is the
*ratio* of two GPUs' predicted times (Habitat's idea, Yu et al., USENIX ATC 2021: scale a
measured step to another GPU by what the model says changes):

    steps/s(target) = steps/s measured(reference) × time(reference) / time(target)

``transfer_steps_per_s`` does that; ``REFERENCE_GPU`` names the measured GPU it scales from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from functools import lru_cache

from apportion.perf.accelerators import get_accelerator
from apportion.perf.layers import Layer, Net, TrainingStep, step_time
from apportion.perf.roofline import Gemm

REFERENCE_GPU = "v100"
REFERENCE_REASON = (
    "v100 is the closest measured GPU to t4, a100 and h100: the newest of Gavel's three "
    "(Volta, sm_70), next to Turing (sm_75), with Ampere and Hopper its successors; the "
    "K80 (Kepler) and P100 (Pascal) are further away in architecture and in size."
)

# --- constants the sources fix -----------------------------------------------------------------

WIKITEXT2_VOCAB = 33_278  # Merity et al., "Pointer Sentinel Mixture Models" (2016), WikiText-2 vocabulary
LM_BPTT, LM_EMSIZE, LM_NHID, LM_LAYERS = 35, 200, 200, 2  # Gavel language_modeling/main.py defaults
ML20M_USERS, ML20M_ITEMS, ML20M_INTERACTIONS = 136_677, 20_108, 10_000_000  # Liang et al. 2018, Table 1
REC_HIDDEN = 200  # Gavel recommendation/train.py: DynamicAutoencoder(hidden_layers=[200])
PONG_ACTIONS = 6  # Gym PongDeterministic-v4's action space
A3C_ROLLOUT = 20  # dgriff777/rl_a3c_pytorch main.py --num-steps default
CYCLEGAN_SIZE, CYCLEGAN_RES_BLOCKS = 256, 9  # Gavel cyclegan.py defaults (--img_height, --n_residual_blocks)

# --- constants no source fixes (assumed) -------------------------------------------------------

MULTI30K_PADDED_LEN = 25  # assumed: tokens per padded sentence (≈12-word sentences + BOS/EOS,
#                           padded to the batch's longest); not measured from the data set
MULTI30K_VOCAB = 3_000  # assumed: words seen more than 5 times in lower-cased Multi30k, per side


def ml20m_items_in_batch(users: int) -> int:
    """Distinct items among ``users`` random ML-20M users, if every item were equally popular.

    Recoder's negative sampling makes a batch's vectors as wide as the items its users touched.
    With 10.0M interactions over 136,677 users and 20,108 items (Liang et al. 2018), a user has
    73 items on average; uniform popularity gives N·(1 − (1 − 73/N)^B). Real popularity is
    skewed, so this is an upper bound on the width (and the cost) of a batch.
    """
    per_user = ML20M_INTERACTIONS / ML20M_USERS
    return round(ML20M_ITEMS * (1.0 - (1.0 - per_user / ML20M_ITEMS) ** users))


# --- architectures -----------------------------------------------------------------------------


def resnet18_cifar(batch: int) -> TrainingStep:
    """ResNet-18 for 32 × 32 CIFAR-10 images (kuangliu/pytorch-cifar models/resnet.py, which
    Gavel's cifar10/main.py imports): 3 × 3 stem, no max-pool, stages of 64/128/256/512
    channels on 32/16/8/4-pixel maps, 4 × 4 average pool, 10-way linear. SGD, momentum 0.9,
    weight decay 5e-4."""
    net = Net(f"resnet18/bs{batch}", optimizer="sgd_momentum_wd")
    x = net.conv2d("conv1", (batch, 3, 32, 32), 64, 3, 1, 1, bias=False, input_grad=False)
    net.batchnorm("bn1", x)
    net.relu("relu1", x)
    for stage, (planes, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), 1):
        for block in range(2):
            x = _basic_block(net, f"layer{stage}.{block}", x, planes, stride if block == 0 else 1)
    x = net.pool("avgpool", x, 4, 4)
    net.linear("linear", batch, 512, 10)
    net.softmax_cross_entropy("loss", batch, 10)
    # inputs/targets to the GPU (2), outputs.max, eq, sum (3), the loss's backward seed (1)
    net.extra_kernels = 6
    return net.build()


def _basic_block(net: Net, name: str, x, planes: int, stride: int):
    y = net.conv2d(f"{name}.conv1", x, planes, 3, stride, 1, bias=False)
    net.batchnorm(f"{name}.bn1", y)
    net.relu(f"{name}.relu1", y)
    y = net.conv2d(f"{name}.conv2", y, planes, 3, 1, 1, bias=False)
    net.batchnorm(f"{name}.bn2", y)
    if stride != 1 or x[1] != planes:
        s = net.conv2d(f"{name}.shortcut", x, planes, 1, stride, 0, bias=False)
        net.batchnorm(f"{name}.shortcut_bn", s)
    net.add_tensors(f"{name}.add", y)
    net.relu(f"{name}.relu2", y)
    return y


def resnet50_imagenet(batch: int) -> TrainingStep:
    """ResNet-50 for 224 × 224 ImageNet images (torchvision.models.resnet50, which Gavel's
    imagenet/main.py builds with ``-a resnet50``; He et al., CVPR 2016, with the stride on the
    3 × 3 convolution as torchvision places it): 7 × 7/2 stem, 3 × 3/2 max-pool, bottleneck
    stages [3, 4, 6, 3] of width 64/128/256/512 (× 4 out), average pool, 1000-way linear. SGD,
    momentum 0.9, weight decay 1e-4."""
    net = Net(f"resnet50/bs{batch}", optimizer="sgd_momentum_wd")
    x = net.conv2d("conv1", (batch, 3, 224, 224), 64, 7, 2, 3, bias=False, input_grad=False)
    net.batchnorm("bn1", x)
    net.relu("relu", x)
    x = net.pool("maxpool", x, 3, 2, 1)
    for stage, (planes, blocks, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), 1):
        for block in range(blocks):
            x = _bottleneck(net, f"layer{stage}.{block}", x, planes, stride if block == 0 else 1)
    x = net.pool("avgpool", x, 7, 7)
    net.linear("fc", batch, 2048, 1000)
    net.softmax_cross_entropy("loss", batch, 1000)
    # inputs/targets to the GPU (2), accuracy(): topk, eq, two float+sum+mul_ (8), backward seed (1)
    net.extra_kernels = 11
    return net.build()


def _bottleneck(net: Net, name: str, x, planes: int, stride: int):
    y = net.conv2d(f"{name}.conv1", x, planes, 1, 1, 0, bias=False)
    net.batchnorm(f"{name}.bn1", y)
    net.relu(f"{name}.relu1", y)
    y = net.conv2d(f"{name}.conv2", y, planes, 3, stride, 1, bias=False)
    net.batchnorm(f"{name}.bn2", y)
    net.relu(f"{name}.relu2", y)
    y = net.conv2d(f"{name}.conv3", y, 4 * planes, 1, 1, 0, bias=False)
    net.batchnorm(f"{name}.bn3", y)
    if stride != 1 or x[1] != 4 * planes:
        s = net.conv2d(f"{name}.downsample", x, 4 * planes, 1, stride, 0, bias=False)
        net.batchnorm(f"{name}.downsample_bn", s)
    net.add_tensors(f"{name}.add", y)
    net.relu(f"{name}.relu3", y)
    return y


def transformer_multi30k(batch: int) -> TrainingStep:
    """The Transformer of Gavel's translation/train.py (jadore801120/attention-is-all-you-need-
    pytorch, as copied into Gavel): 6 + 6 layers, d_model 512, 8 heads of 64, inner 2048,
    dropout 0.1, target projection sharing the target embedding (``-proj_share_weight``),
    sinusoid position tables frozen; Adam (0.9, 0.98). Sentences padded to
    ``MULTI30K_PADDED_LEN`` (assumed), vocabularies of ``MULTI30K_VOCAB`` (assumed)."""
    d, inner, heads, dk, layers = 512, 2048, 8, 64, 6
    src_len, tgt_len = MULTI30K_PADDED_LEN, MULTI30K_PADDED_LEN - 1  # the decoder drops the last token
    net = Net(f"transformer/bs{batch}", optimizer="adam")
    src, tgt = batch * src_len, batch * tgt_len
    net.embedding("src_emb", src, MULTI30K_VOCAB, d)
    net.elementwise("src_pos", src * d, reads=1, writes=1, backward=False)  # frozen table lookup
    net.add_tensors("src_emb_add", (src, d))
    net.extra_kernels += 3  # key-padding mask (eq, expand) and non-pad mask (ne, float)
    for i in range(layers):
        _attention(net, f"enc{i}.self", batch, src_len, src_len, d, heads, dk)
        _feed_forward(net, f"enc{i}.ffn", src, d, inner)
    net.embedding("tgt_emb", tgt, MULTI30K_VOCAB, d)
    net.elementwise("tgt_pos", tgt * d, reads=1, writes=1, backward=False)
    net.add_tensors("tgt_emb_add", (tgt, d))
    net.extra_kernels += 8  # subsequent (triu), key-padding, their sum and gt, cross mask, non-pad mask
    for i in range(layers):
        _attention(net, f"dec{i}.self", batch, tgt_len, tgt_len, d, heads, dk)
        _attention(net, f"dec{i}.cross", batch, tgt_len, src_len, d, heads, dk)
        _feed_forward(net, f"dec{i}.ffn", tgt, d, inner)
    net.linear("tgt_word_prj", tgt, d, MULTI30K_VOCAB, bias=False, module="tgt_emb")  # shared weight
    net.elementwise("logit_scale", tgt * MULTI30K_VOCAB)
    net.softmax_cross_entropy("loss", tgt, MULTI30K_VOCAB)
    # pred.max, gold.ne, eq, masked_select (2), sum, two .item(), backward seed, inputs to GPU (4)
    net.extra_kernels += 12
    return net.build()


def _attention(net: Net, name: str, batch: int, lq: int, lk: int, d: int, heads: int, dk: int) -> None:
    """MultiHeadAttention as jadore801120's SubLayers.py wrote it (2018): three projections,
    three permute-copies, a repeated mask, scaled dot-product attention (bmm, divide,
    masked_fill, softmax, dropout, bmm), a permute-copy back, the output projection, dropout,
    residual add, LayerNorm, then the layer's ``*= non_pad_mask``."""
    q_rows, k_rows = batch * lq, batch * lk
    net.linear(f"{name}.w_qs", q_rows, d, heads * dk)
    net.linear(f"{name}.w_ks", k_rows, d, heads * dk)
    net.linear(f"{name}.w_vs", k_rows, d, heads * dk)
    net.elementwise(f"{name}.permute_q", q_rows * d)
    net.elementwise(f"{name}.permute_k", k_rows * d)
    net.elementwise(f"{name}.permute_v", k_rows * d)
    scores = batch * heads * lq * lk
    net.elementwise(f"{name}.mask_repeat", scores, reads=0.125, writes=0.25, backward=False)  # uint8 mask
    net.matmul(f"{name}.qk", batch * heads, lq, lk, dk)
    net.elementwise(f"{name}.scale", scores)
    net.elementwise(f"{name}.masked_fill", scores, reads=1.25, writes=1)
    net.elementwise(f"{name}.softmax", scores, reads=2, writes=1, flops_per_element=4)
    net.elementwise(f"{name}.dropout", scores, reads=1, writes=1.25)
    net.matmul(f"{name}.av", batch * heads, lq, dk, lk)
    net.elementwise(f"{name}.permute_out", q_rows * d)
    net.linear(f"{name}.fc", q_rows, heads * dk, d)
    net.elementwise(f"{name}.dropout_out", q_rows * d, reads=1, writes=1.25)
    net.add_tensors(f"{name}.residual", (q_rows, d))
    net.elementwise(f"{name}.layer_norm", q_rows * d, reads=2, writes=1, flops_per_element=8,
                    params=2 * d, param_tensors=2)
    net.elementwise(f"{name}.non_pad", q_rows * d, reads=1.0, writes=1)


def _feed_forward(net: Net, name: str, rows: int, d: int, inner: int) -> None:
    """PositionwiseFeedForward (2018): transpose, 1 × 1 Conv1d d → inner, ReLU, Conv1d back,
    transpose, dropout, residual add, LayerNorm, ``*= non_pad_mask``."""
    net.elementwise(f"{name}.transpose_in", rows * d)
    net.linear(f"{name}.w_1", rows, d, inner)
    net.relu(f"{name}.relu", (rows, inner))
    net.linear(f"{name}.w_2", rows, inner, d)
    net.elementwise(f"{name}.transpose_out", rows * d)
    net.elementwise(f"{name}.dropout", rows * d, reads=1, writes=1.25)
    net.add_tensors(f"{name}.residual", (rows, d))
    net.elementwise(f"{name}.layer_norm", rows * d, reads=2, writes=1, flops_per_element=8,
                    params=2 * d, param_tensors=2)
    net.elementwise(f"{name}.non_pad", rows * d, reads=1.0, writes=1)


def lstm_wikitext2(batch: int) -> TrainingStep:
    """The word-level LSTM language model of Gavel's language_modeling/main.py (PyTorch's
    examples/word_language_model RNNModel): embedding 33,278 × 200, dropout 0.2, a 2-layer
    cuDNN LSTM of 200 units over 35 steps, dropout, a 200 → 33,278 decoder (untied: Gavel's
    command has no ``--tied``), cross-entropy; plain SGD after clip_grad_norm_(0.25)."""
    tokens = LM_BPTT * batch
    net = Net(f"lm/bs{batch}", optimizer="sgd_clip")
    net.embedding("encoder", tokens, WIKITEXT2_VOCAB, LM_EMSIZE)
    net.elementwise("drop_in", tokens * LM_EMSIZE, reads=1, writes=1.25)
    fin = LM_EMSIZE
    for layer in range(LM_LAYERS):
        net.lstm_layer(f"rnn.l{layer}", LM_BPTT, batch, fin, LM_NHID)
        fin = LM_NHID
    net.elementwise("drop_out", tokens * LM_NHID, reads=1, writes=1.25)
    net.linear("decoder", tokens, LM_NHID, WIKITEXT2_VOCAB)
    net.softmax_cross_entropy("loss", tokens, WIKITEXT2_VOCAB)
    # Gavel's CorpusDataset pads every sample with torch.cat on the GPU (data and target: 2 per
    # sample), the collate stacks them (2), targets.flatten() copies (1); loss.item, backward seed
    net.extra_kernels = 2 * batch + 5
    return net.build()


def recoder_ml20m(batch: int) -> TrainingStep:
    """Gavel's recommendation job: Recoder's DynamicAutoencoder (hidden_layers=[200], tanh,
    input dropout 0.5, untied) trained on ML-20M with mini-batch negative sampling, so each
    batch is ``batch`` users × the items they touched (``ml20m_items_in_batch``), dense.
    Encoder and decoder are embedding tables (items × 200) gathered to the batch's items, then
    a product each; loss BCEWithLogits (summed); Adam, weight decay 2e-5 except on biases."""
    users, items, h = batch, ml20m_items_in_batch(batch), REC_HIDDEN
    cells = users * items
    net = Net(f"recommendation/bs{batch}", optimizer="adam_wd")
    net.elementwise("to_dense", cells, reads=0, writes=1, kernels=2, backward=False)
    net.elementwise("normalize", cells, reads=2, writes=1, kernels=3, backward=False)
    net.elementwise("noise_dropout", cells, reads=1, writes=1.25, backward=False)
    net.embedding("en_embedding", items, ML20M_ITEMS, h)
    b = net.b
    net.add(Layer("encode", 2.0 * users * items * h + users * h, b * (items * h + cells + users * h), 2,
                  Gemm(users, h, items), users * h, True, input_grad=False))
    net.param("en_bias", h, 1)
    net.relu("tanh", (users, h))
    net.embedding("de_embedding", items, ML20M_ITEMS, h)
    net.elementwise("de_bias_select", items, reads=1, writes=1, params=ML20M_ITEMS, param_tensors=1,
                    module="de_bias")
    net.add(Layer("decode", 2.0 * users * items * h + cells, b * (items * h + users * h + cells), 2,
                  Gemm(users, items, h), cells, True))
    # PyTorch 1.x binary_cross_entropy_with_logits is composite: 14 element-wise kernels
    # (neg, clamp_min_, rsub, mul_, add_, neg, exp_, neg, sub, exp_, add_, log_, add_, sum)
    # touching 32 values per element; its backward is one formula (sigmoid, sub, mul: 8)
    net.elementwise("bce_with_logits", cells, reads=20, writes=12, flops_per_element=10, kernels=14,
                    backward=False)
    net.elementwise("bce_with_logits.grad", cells, reads=5, writes=3, flops_per_element=6, kernels=3,
                    backward=False)
    net.params = {m: (e, t, "adam" if "bias" in m else "adam_wd") for m, (e, t, _) in net.params.items()}
    # sparse indices/values, items, users, normaliser to the GPU (5), divide, loss.item, seed
    net.extra_kernels = 8
    return net.build()


def a3c_pong() -> TrainingStep:
    """One update of rank 0 of Gavel's A3C job (dgriff777/rl_a3c_pytorch, ``A3Clstm``): a
    20-step rollout at batch 1 of 1 × 80 × 80 frames through conv 5×5 (32, pad 2), conv 5×5
    (32, pad 1), conv 4×4 (64, pad 1), conv 3×3 (64, pad 1), each with 2 × 2 max-pool and ReLU,
    an LSTMCell(1024, 512) and two linear heads; one bootstrap forward; backward through the
    rollout. The shared model and its Adam live on the host (``shared_optim.py``): parameters
    are copied in and gradients out every update, the optimizer runs on the CPU and is not
    priced. Three more worker processes share the GPU; not modelled."""
    net = Net("a3c", optimizer="none")
    for t in range(A3C_ROLLOUT + 1):
        bootstrap = t == A3C_ROLLOUT
        x = (1, 1, 80, 80)
        for i, (cout, k, pad) in enumerate(((32, 5, 2), (32, 5, 1), (64, 4, 1), (64, 3, 1)), 1):
            x = net.conv2d(f"t{t}.conv{i}", x, cout, k, 1, pad, module=f"conv{i}", input_grad=i > 1,
                           backward=not bootstrap)
            x = net.pool(f"t{t}.pool{i}", x, 2, 2, backward=not bootstrap)
            net.relu(f"t{t}.relu{i}", x, backward=not bootstrap)
        net.linear(f"t{t}.lstm_ih", 1, 1024, 2048, module="lstm_ih", backward=not bootstrap)
        net.linear(f"t{t}.lstm_hh", 1, 512, 2048, module="lstm_hh", backward=not bootstrap)
        net.elementwise(f"t{t}.lstm_cell", 2048, reads=2, writes=2, backward=not bootstrap)
        net.linear(f"t{t}.critic", 1, 512, 1, module="critic", backward=not bootstrap)
        net.linear(f"t{t}.actor", 1, 512, PONG_ACTIONS, module="actor", backward=not bootstrap)
    # per rollout step: softmax, log_softmax, mul, sum, neg, multinomial (2), gather, the frame to
    # the GPU (10); per update: the return/GAE loop (~15 small ops per step, and as many in
    # backward), state-dict copies in and gradients out (2 per tensor), zero_grad (1 per tensor)
    tensors = sum(t for _, t, _ in net.params.values())
    net.extra_kernels = 10 * A3C_ROLLOUT + 30 * A3C_ROLLOUT + 3 * tensors
    return net.build()


def cyclegan_monet2photo() -> TrainingStep:
    """One step of Gavel's CycleGAN job (eriklindernoren/PyTorch-GAN implementations/cyclegan,
    ``GeneratorResNet`` and the PatchGAN ``Discriminator``) at batch 1, 256 × 256: six generator
    passes (two identity, two translations, two reconstructions) and two discriminator passes
    for the generators' loss, then two discriminator passes for each discriminator's loss;
    backward through all; Adam for the generators and for each discriminator."""
    net = Net("cyclegan", optimizer="adam")
    real = (1, 3, CYCLEGAN_SIZE, CYCLEGAN_SIZE)
    for i, (g, input_grad) in enumerate((("G_BA", False), ("G_AB", False), ("G_AB", False),
                                         ("G_BA", False), ("G_BA", True), ("G_AB", True))):
        _generator(net, f"{g}#{i}", g, real, input_grad)
    for i, (d, input_grad) in enumerate((("D_B", True), ("D_A", True), ("D_A", False), ("D_A", False),
                                         ("D_B", False), ("D_B", False))):
        _discriminator(net, f"{d}#{i}", d, real, input_grad)
    for i in range(10):  # four L1 and six MSE losses: a difference and a mean each
        net.elementwise(f"loss{i}", math.prod(real) if i < 4 else 256, reads=2, writes=1, kernels=2)
    # valid/fake targets to the GPU (2), replay-buffer clones (2), five .item(), three backward seeds
    net.extra_kernels = 12
    return net.build()


def _generator(net: Net, name: str, module: str, x, input_grad: bool) -> None:
    def conv(tag, x, cout, k, stride=1, pad=0, first=False):
        return net.conv2d(f"{name}.{tag}", x, cout, k, stride, pad, module=f"{module}.{tag}",
                          input_grad=input_grad or not first)

    def pad(tag, x, p):
        n, c, h, w = x
        out = (n, c, h + 2 * p, w + 2 * p)
        net.elementwise(f"{name}.{tag}", math.prod(out), backward=input_grad or tag != "pad0")
        return out

    def norm_relu(tag, x, relu=True):
        net.instancenorm(f"{name}.{tag}.in", x)
        if relu:
            net.relu(f"{name}.{tag}.relu", x)

    y = conv("c0", pad("pad0", x, 3), 64, 7, first=True)
    norm_relu("c0", y)
    for i in range(2):
        y = conv(f"down{i}", y, y[1] * 2, 3, 2, 1)
        norm_relu(f"down{i}", y)
    for r in range(CYCLEGAN_RES_BLOCKS):
        z = conv(f"res{r}.c1", pad(f"res{r}.pad1", y, 1), y[1], 3)
        norm_relu(f"res{r}.c1", z)
        z = conv(f"res{r}.c2", pad(f"res{r}.pad2", z, 1), y[1], 3)
        norm_relu(f"res{r}.c2", z, relu=False)
        net.add_tensors(f"{name}.res{r}.add", z)
    for i in range(2):
        n, c, h, w = y
        up = (n, c, 2 * h, 2 * w)
        net.elementwise(f"{name}.up{i}.upsample", math.prod(up), reads=0.25, writes=1)
        y = conv(f"up{i}", up, c // 2, 3, 1, 1)
        norm_relu(f"up{i}", y)
    y = conv("out", pad("pad_out", y, 3), 3, 7)
    net.elementwise(f"{name}.tanh", math.prod(y))


def _discriminator(net: Net, name: str, module: str, x, input_grad: bool) -> None:
    for i, (cout, norm) in enumerate(((64, False), (128, True), (256, True), (512, True))):
        x = net.conv2d(f"{name}.c{i}", x, cout, 4, 2, 1, module=f"{module}.c{i}",
                       input_grad=input_grad or i > 0)
        if norm:
            net.instancenorm(f"{name}.c{i}.in", x)
        net.relu(f"{name}.c{i}.leaky", x)
    n, c, h, w = x
    x = (n, c, h + 1, w + 1)
    net.elementwise(f"{name}.zeropad", math.prod(x))
    net.conv2d(f"{name}.out", x, 1, 4, 1, 1, module=f"{module}.out")


ARCHITECTURES: dict[str, str] = {
    "resnet18": "ResNet-18 (He et al., CVPR 2016) for CIFAR-10 as kuangliu/pytorch-cifar models/resnet.py "
                "writes it (3x3 stem, no max-pool, 32x32 input); Gavel workloads/pytorch/image_classification/"
                "cifar10/main.py: SGD momentum 0.9, weight decay 5e-4",
    "resnet50": "ResNet-50 (He et al., CVPR 2016) as torchvision.models.resnet50 (224x224 input); Gavel "
                "workloads/pytorch/image_classification/imagenet/main.py: SGD momentum 0.9, weight decay 1e-4",
    "transformer": "Transformer (Vaswani et al., NeurIPS 2017) as jadore801120/attention-is-all-you-need-pytorch "
                   "(2018) writes it, via Gavel workloads/pytorch/translation/: 6+6 layers, d_model 512, 8 heads, "
                   "d_inner 2048, -proj_share_weight, Adam; padded length and vocabulary assumed",
    "lm": "2-layer LSTM language model (PyTorch examples/word_language_model) via Gavel "
          "workloads/pytorch/language_modeling/main.py: emsize 200, nhid 200, bptt 35, untied, WikiText-2 "
          "vocabulary 33,278 (Merity et al. 2016), SGD with gradient clipping",
    "recommendation": "Recoder DynamicAutoencoder (hidden 200, tanh) via Gavel workloads/pytorch/recommendation/"
                      "train.py on ML-20M as preprocessed by vae_cf (Liang et al., WWW 2018: 136,677 users, "
                      "20,108 items, 10.0M interactions), mini-batch negative sampling, Adam",
    "a3c": "A3Clstm of dgriff777/rl_a3c_pytorch via Gavel workloads/pytorch/rl/: 4 convs + LSTMCell(1024, 512) "
           "on 1x80x80 Pong frames, 20-step rollouts at batch 1; host-side emulator and optimizer not modelled",
    "cyclegan": "CycleGAN (Zhu et al., ICCV 2017) as eriklindernoren/PyTorch-GAN implementations/cyclegan/"
                "models.py writes it, via Gavel workloads/pytorch/cyclegan/cyclegan.py: ResNet generator with 9 "
                "residual blocks and PatchGAN discriminator at 256x256, batch 1, Adam",
}


def build_step(kind: str) -> TrainingStep:
    """The training step of catalog kind ``kind`` (``resnet50/bs64``, ``a3c`` …)."""
    model, _, size = kind.partition("/bs")
    builders = {"resnet18": resnet18_cifar, "resnet50": resnet50_imagenet,
                "transformer": transformer_multi30k, "lm": lstm_wikitext2, "recommendation": recoder_ml20m}
    if model in builders and size.isdigit():
        return builders[model](int(size))
    if kind == "a3c":
        return a3c_pong()
    if kind == "cyclegan":
        return cyclegan_monet2photo()
    raise ValueError(f"no layer model for job kind '{kind}' (known: {', '.join(sorted(ARCHITECTURES))} "
                     f"with /bsN where batched)")


@lru_cache(maxsize=None)
def _step(kind: str) -> TrainingStep:
    return build_step(kind)


def predict_step_time(kind: str, gpu_type: str, sustained: bool = True, floor_cycles: float | None = None) -> float:
    """Seconds per training step of ``kind`` on one ``gpu_type`` GPU, by the per-layer roofline
    (``sustained=False``: every GPU at its datasheet peak; ``floor_cycles``: a kernel's fixed
    cycles, ``apportion.perf.roofline.KERNEL_FLOOR_CYCLES`` unless given)."""
    if floor_cycles is None:
        return step_time(_step(kind), get_accelerator(gpu_type), sustained).total
    base, per_cycle = _time_parts(kind, gpu_type, sustained)
    return base + per_cycle * floor_cycles


@lru_cache(maxsize=None)
def _time_parts(kind: str, gpu_type: str, sustained: bool) -> tuple[float, float]:
    """A kind's step time with no kernel floor, and the seconds each cycle of floor adds to it."""
    acc = get_accelerator(gpu_type)
    timed = step_time(_step(kind), acc, sustained, floor_cycles=0)
    clock = acc.clock_hz(sustained) if acc.boost_clock_mhz else math.inf
    return timed.total, timed.kernels / clock


FLOOR_GRID_CYCLES = tuple(range(0, 64_001, 500))


def fit_kernel_floor(measured: Mapping[str, Mapping[str, float]], fit_on: Iterable[str],
                     reference: str = REFERENCE_GPU, sustained: bool = True) -> float:
    """The kernel floor (cycles, from ``FLOOR_GRID_CYCLES``) whose predicted ratios of one-GPU
    steps/s, each GPU of ``fit_on`` to ``reference``, come closest to the measured ones (least
    mean relative error). ``measured`` maps a kind to its steps/s per GPU type; kinds without
    a finite positive number on both GPUs are skipped. Only the GPUs named are looked at, so a
    GPU left out of ``fit_on`` (and not the reference) is left out of the fit."""
    pairs = [(kind, gpu, rates[gpu] / rates[reference]) for kind, rates in measured.items()
             for gpu in fit_on if _usable(rates.get(gpu)) and _usable(rates.get(reference))]
    if not pairs:
        raise ValueError(f"no kind has measured steps/s on both {reference} and one of {sorted(fit_on)}")

    def mean_error(cycles: float) -> float:
        return sum(abs(predict_step_time(kind, reference, sustained, cycles)
                       / predict_step_time(kind, gpu, sustained, cycles) - ratio) / ratio
                   for kind, gpu, ratio in pairs) / len(pairs)

    return float(min(FLOOR_GRID_CYCLES, key=mean_error))


def _usable(rate: float | None) -> bool:
    return rate is not None and math.isfinite(rate) and rate > 0


def predict_steps_per_s(kind_name: str, gpu_type: str) -> float:
    """Steps per second of ``kind_name`` on one ``gpu_type`` GPU, by the model alone (FP32).

    Use it for ratios between GPUs; for a number to schedule with, scale a measurement with
    ``transfer_steps_per_s`` instead (the model ignores host-side time).
    """
    return 1.0 / predict_step_time(kind_name, gpu_type)


def transfer_steps_per_s(kind: str, measured_steps_per_s: float, measured_on: str, target: str) -> float:
    """Habitat-style transfer of a one-GPU measurement to another GPU type:
    measured × time(measured_on) / time(target), both times from the per-layer roofline."""
    if not (measured_steps_per_s > 0 and math.isfinite(measured_steps_per_s)):
        return math.nan
    return measured_steps_per_s * predict_step_time(kind, measured_on) / predict_step_time(kind, target)
