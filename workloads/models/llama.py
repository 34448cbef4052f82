"""One decoder block of a Llama-2-7B-class model, as Hugging Face transformers' `LlamaDecoderLayer`
(`modeling_llama.py`: RMSNorm, q/k/v/o projections without bias, rotary position embeddings,
causal attention over a key/value cache, SwiGLU MLP), after Touvron et al. 2023, "Llama 2: Open
Foundation and Fine-Tuned Chat Models", arXiv:2307.09288. Hidden 4096, 32 heads of 128, MLP 11008."""

from __future__ import annotations

import math

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotate(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding of [batch, heads, seq, head_size] at the given positions."""
    half = x.shape[-1] // 2
    inverse = base ** (-torch.arange(0, half, dtype=x.dtype, device=x.device) / half)
    angles = positions.to(x.dtype)[:, None] * inverse[None, :]
    cos, sin = torch.cos(angles).repeat(1, 2), torch.sin(angles).repeat(1, 2)
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class LlamaDecoderLayer(nn.Module):
    """`forward(x, past_k, past_v)`: the block's output for the new tokens `x` [batch, new, hidden],
    attending to the `past` cached keys and values [batch, heads, past, head_size] (past may be 0)."""

    def __init__(self, hidden: int = 4096, heads: int = 32, intermediate: int = 11008) -> None:
        super().__init__()
        self.heads, self.head_size = heads, hidden // heads
        self.input_norm = RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.post_attention_norm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.heads, self.head_size).transpose(1, 2)

    def attention(self, x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor) -> torch.Tensor:
        past, new = past_k.shape[2], x.shape[1]
        positions = torch.arange(past, past + new, device=x.device)
        q = rotate(self._split(self.q_proj(x)), positions)
        k = torch.cat((past_k, rotate(self._split(self.k_proj(x)), positions)), dim=2)
        v = torch.cat((past_v, self._split(self.v_proj(x))), dim=2)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_size)
        causal = torch.full((new, past + new), float("-inf"), device=x.device).triu(past + 1)
        context = torch.matmul(torch.softmax(scores + causal, dim=-1), v)
        batch = x.shape[0]
        return self.o_proj(context.transpose(1, 2).reshape(batch, new, self.heads * self.head_size))

    def forward(self, x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.input_norm(x), past_k, past_v)
        h = self.post_attention_norm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))
