# SPDX-License-Identifier: BSD-3-Clause
"""A small GPT-style byte-level language model (pure PyTorch, 1.13 and 2.x).

Token and position embeddings, pre-LayerNorm blocks of causal
self-attention and an MLP, a final LayerNorm and a linear head over the 256
byte values. Initialisation draws only from torch's global generator in
module order, so torch.manual_seed(s) before GPT(cfg) gives the same weights
in every process. Attention is written out (no
F.scaled_dot_product_attention, which 1.13 lacks): the arithmetic is then the
same kernels on every version of a given build, and deterministic on CPU.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab: int = 256  # bytes
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    ctx: int = 64
    dropout: float = 0.1
    # Tied head: head.weight IS tok.weight (one Parameter, shared storage).
    # state_dict() then lists the same storage under both names; whoever
    # loads or broadcasts state must write it once, not twice.
    tied: bool = False

    def __post_init__(self):
        if self.d_model % self.n_head:
            raise ValueError(
                f"d_model {self.d_model} is not a multiple of n_head "
                f"{self.n_head}: choose --d-model divisible by the heads")
        for k in ("vocab", "n_layer", "n_head", "d_model", "ctx"):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be at least 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("dropout must be in [0, 1)")


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        b, t, c = x.shape
        h = self.n_head
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, h, c // h).transpose(1, 2)
        k = k.view(b, t, h, c // h).transpose(1, 2)
        v = v.view(b, t, h, c // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // h))
        # Built here, not kept as a buffer: DDP broadcasts buffers, and gloo
        # has no bool type (nor is a constant state).
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(future, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg=None):
        super().__init__()
        self.cfg = cfg = cfg or GPTConfig()
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.ctx, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        if cfg.tied:
            self.head.weight = self.tok.weight
        self.apply(self._init)
        # GPT-2: residual projections scaled down by depth.
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, x):
        """x: LongTensor [B, T] of bytes, T <= ctx -> logits [B, T, vocab]."""
        t = x.shape[1]
        if t > self.cfg.ctx:
            raise ValueError(f"sequence of {t} tokens exceeds ctx {self.cfg.ctx}")
        pos = torch.arange(t, device=x.device)
        h = self.drop(self.tok(x) + self.pos(pos))
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.ln_f(h))


class Embed(nn.Module):
    """GPT's input side (token and position embeddings, dropout) as a
    module of its own, over the model's own submodules: a pipeline's first
    unit."""

    def __init__(self, gpt):
        super().__init__()
        self.ctx, self.tok, self.pos, self.drop = (gpt.cfg.ctx, gpt.tok,
                                                   gpt.pos, gpt.drop)

    def forward(self, x):
        t = x.shape[1]
        if t > self.ctx:
            raise ValueError(f"sequence of {t} tokens exceeds ctx {self.ctx}")
        pos = torch.arange(t, device=x.device)
        return self.drop(self.tok(x) + self.pos(pos))


class Head(nn.Module):
    """GPT's output side (final LayerNorm, linear head): the last unit."""

    def __init__(self, gpt):
        super().__init__()
        self.ln_f, self.head = gpt.ln_f, gpt.head

    def forward(self, h):
        return self.head(self.ln_f(h))


def pipeline_units(model):
    """The model's pipeline units: Embed, the blocks, Head (the same
    arithmetic as model.forward, run one after the other)."""
    return [Embed(model)] + list(model.blocks) + [Head(model)]


def pipeline_stages(model, k):
    """The model as k pipeline stages (module lists for resihp.torch's
    Trainer(stages=...)): its units Embed, the blocks, Head, in k
    contiguous runs as even as can be; the same arithmetic as
    model.forward. A tied head (--tie) cannot be split from the embedding:
    the Trainer refuses it."""
    units = pipeline_units(model)
    if not 1 <= k <= len(units):
        raise ValueError(f"{k} stages for {len(units)} units (the embedding, "
                         f"{len(units) - 2} blocks, the head): choose 1.."
                         f"{len(units)} or more --layers")
    cuts = [i * len(units) // k for i in range(k + 1)]
    return [units[a:b] for a, b in zip(cuts, cuts[1:])]
