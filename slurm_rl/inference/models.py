"""The five model structures profiles ship for, built from torch modules (imports torch).

Every tensor that passes between two modules is the output of a leaf module (residual sums are
an `Add` module, reshapes live inside leaf modules), so forward hooks see the whole layer graph
(profiler.py). Build on the meta device for profiling (no weights), on the CPU to time them.
Sizes are small-to-mid (batch 1, 112x112 images, 128 tokens) so that timing them on a shared
2-core CPU takes seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn


class Add(nn.Module):
    """A residual sum as its own layer (memory-bound: 0 FLOPs to torch's counter)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


class Flatten(nn.Flatten):
    pass


class SelfAttention(nn.Module):
    """Scaled dot-product attention over a fused QKV tensor (B, S, 3H) -> (B, S, H)."""

    def __init__(self, hidden: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.hidden, self.heads, self.causal = hidden, heads, causal

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        b, s, _ = qkv.shape
        d = self.hidden // self.heads
        q, k, v = qkv.view(b, s, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        if self.causal:
            mask = torch.ones(s, s, dtype=torch.bool, device=qkv.device).triu(1)
            att = att.masked_fill(mask, float("-inf"))
        out = torch.matmul(att.softmax(-1), v)
        return out.transpose(1, 2).reshape(b, s, self.hidden)


def vgg() -> tuple[nn.Module, torch.Tensor]:
    """A VGG-11-style chain: 8 convolutions, 5 max-pools, 3 fully connected layers."""
    layers: list[nn.Module] = []
    c = 3
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            assert isinstance(v, int)
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU()]
            c = v
    layers += [Flatten(), nn.Linear(512 * 3 * 3, 1024), nn.ReLU(), nn.Linear(1024, 1024),
               nn.ReLU(), nn.Linear(1024, 1000)]
    return nn.Sequential(*layers), torch.empty(1, 3, 112, 112)


class _Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None)
        self.add = Add()
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        skip = self.down(x) if self.down is not None else x
        out2: torch.Tensor = self.relu2(self.add(out, skip))
        return out2


def resnet() -> tuple[nn.Module, torch.Tensor]:
    """A ResNet-18-style CNN: 8 basic blocks with identity and projection skips."""
    blocks: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                               nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    c = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        blocks += [_Basic(c, cout, stride), _Basic(cout, cout, 1)]
        c = cout
    blocks += [nn.AdaptiveAvgPool2d(1), Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*blocks), torch.empty(1, 3, 112, 112)


def mobilenet() -> tuple[nn.Module, torch.Tensor]:
    """A MobileNet-v1-style chain: 13 depthwise-separable blocks (depthwise 3x3 + pointwise)."""
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU()]
    c = 32
    for cout, stride in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1),
                         (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)):
        layers += [nn.Conv2d(c, c, 3, stride, 1, groups=c), nn.ReLU(),
                   nn.Conv2d(c, cout, 1), nn.ReLU()]
        c = cout
    layers += [nn.AdaptiveAvgPool2d(1), Flatten(), nn.Linear(1024, 1000)]
    return nn.Sequential(*layers), torch.empty(1, 3, 112, 112)


class _Block(nn.Module):
    """A transformer block: post-LN (BERT) or pre-LN with a causal mask (GPT)."""

    def __init__(self, h: int, heads: int, ffn: int, gpt: bool) -> None:
        super().__init__()
        self.gpt = gpt
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.attn = SelfAttention(h, heads, causal=gpt)
        self.proj = nn.Linear(h, h)
        self.add1, self.add2 = Add(), Add()
        self.ffn1, self.act, self.ffn2 = nn.Linear(h, ffn), nn.GELU(), nn.Linear(ffn, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gpt:
            x = self.add1(x, self.proj(self.attn(self.qkv(self.ln1(x)))))
            out: torch.Tensor = self.add2(x, self.ffn2(self.act(self.ffn1(self.ln2(x)))))
            return out
        x = self.ln1(self.add1(x, self.proj(self.attn(self.qkv(x)))))
        out = self.ln2(self.add2(x, self.ffn2(self.act(self.ffn1(x)))))
        return out


def _transformer(gpt: bool) -> tuple[nn.Module, torch.Tensor]:
    h, heads, ffn, depth, vocab, seq = 256, 4, 1024, 4, 8000, 128
    layers: list[nn.Module] = [nn.Embedding(vocab, h)]
    if not gpt:
        layers.append(nn.LayerNorm(h))
    layers += [_Block(h, heads, ffn, gpt) for _ in range(depth)]
    layers += [nn.LayerNorm(h), nn.Linear(h, vocab)] if gpt else [nn.Linear(h, h), nn.Tanh()]
    return nn.Sequential(*layers), torch.zeros(1, seq, dtype=torch.long)


def bert() -> tuple[nn.Module, torch.Tensor]:
    """A BERT-style encoder: embedding, 4 post-LN blocks (hidden 256, 4 heads), 128 tokens."""
    return _transformer(gpt=False)


def gpt() -> tuple[nn.Module, torch.Tensor]:
    """A GPT-style decoder: embedding, 4 pre-LN causal blocks, LM head over 8000 tokens."""
    return _transformer(gpt=True)


BUILDERS: dict[str, Callable[[], tuple[nn.Module, torch.Tensor]]] = {
    "vgg": vgg, "resnet": resnet, "mobilenet": mobilenet, "bert": bert, "gpt": gpt}


def build(name: str, device: str = "meta") -> tuple[nn.Module, torch.Tensor]:
    """The model and an example input, built on `device` ("meta": no weights)."""
    with torch.device(device):
        model, x = BUILDERS[name]()
    return model.eval(), x
