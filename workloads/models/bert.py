"""A BERT-base encoder, layer for layer as Hugging Face transformers' `BertModel` (`modeling_bert.py`:
embeddings, 12 `BertLayer`s with separate query/key/value Linears, the pooler), after Devlin et al.
2018, "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding",
arXiv:1810.04805. Hidden 768, 12 heads of 64, intermediate 3072, vocabulary 30522."""

from __future__ import annotations

import math

import torch
from torch import nn


class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_size = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size) + mask
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        batch, _, seq, _ = context.shape
        return context.permute(0, 2, 1, 3).reshape(batch, seq, self.heads * self.head_size)


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(self.attention_output(self.attention(x, mask)) + x)
        return self.output_norm(self.output(nn.functional.gelu(self.intermediate(x))) + x)


class BertModel(nn.Module):
    """`forward(input_ids)`: the last hidden states and the pooled first token."""

    def __init__(self, vocab: int = 30522, hidden: int = 768, layers: int = 12, heads: int = 12,
                 intermediate: int = 3072, max_positions: int = 512) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, intermediate) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) \
            + self.token_type_embeddings(torch.zeros_like(input_ids))
        x = self.embedding_norm(x)
        mask = torch.zeros(input_ids.shape[0], 1, 1, input_ids.shape[1], dtype=x.dtype, device=x.device)
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler(x[:, 0]))
