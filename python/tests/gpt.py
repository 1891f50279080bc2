"""A small GPT for the tests and the benchmark, laid out as Megatron-LM's (and
models/'s GPT family) so that what autograd saves matches `ssdtrain trace`'s
accounting: [s, b, h] activations, fused QKV viewed per head, standard
attention with a causal mask, dropout on the probabilities, after each sublayer
and on the embeddings, GELU MLP (4h), LayerNorm, an output layer tied to the
word embeddings. fp32 on the CPU. Two runs from one seed compute bitwise the
same thing (dropout draws from torch's generator in the same order)."""

import math

import torch
from torch import nn

# configs/models/tiny-gpt.json at sequence length 128.
LAYERS, HIDDEN, HEADS, SEQ_LEN, VOCAB, MICRO_BATCH = 4, 256, 4, 128, 2048, 4
DROPOUT = 0.1


class Dropout(nn.Module):
    """Dropout that saves a one-byte mask, as nn.Dropout does on a GPU (and
    Megatron's fused kernels do); on the CPU, torch 1.13's nn.Dropout saves a
    float mask the size of its input."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        return torch.native_dropout(x, self.p, True)[0]


class Attention(nn.Module):
    def __init__(self, hidden, heads, seq_len, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = Dropout(dropout)
        self.proj = nn.Linear(hidden, hidden)
        self.scale = 1.0 / math.sqrt(hidden // heads)
        self.register_buffer("causal", torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, x):
        s, b, h = x.shape
        n, d = self.heads, h // self.heads
        q, k, v = self.qkv(x).view(s, b, n, 3 * d).split(d, dim=-1)
        q, k, v = (t.view(s, b * n, d).transpose(0, 1) for t in (q, k, v))  # [b·n, s, d]
        scores = (torch.bmm(q, k.transpose(1, 2)) * self.scale).view(b, n, s, s)
        probs = self.dropout(self.softmax(scores.masked_fill(self.causal[:s, :s], float("-inf"))))
        ctx = torch.bmm(probs.view(b * n, s, s), v)
        return self.proj(ctx.view(b, n, s, d).permute(2, 0, 1, 3).contiguous().view(s, b, h))


class Block(nn.Module):
    def __init__(self, hidden=HIDDEN, heads=HEADS, seq_len=SEQ_LEN, dropout=DROPOUT):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads, seq_len, dropout)
        self.drop1 = Dropout(dropout)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.gelu = nn.GELU()
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.drop2 = Dropout(dropout)

    def forward(self, x):
        x = x + self.drop1(self.attn(self.ln1(x)))
        return x + self.drop2(self.fc2(self.gelu(self.fc1(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq_len=SEQ_LEN, vocab=VOCAB,
                 dropout=DROPOUT):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq_len, hidden)
        self.drop = Dropout(dropout)
        self.blocks = nn.ModuleList(Block(hidden, heads, seq_len, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, idx):
        """idx [b, s] token ids -> logits [s, b, vocab]."""
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        x = self.drop(x.transpose(0, 1).contiguous())
        for block in self.blocks:
            x = block(x)
        return nn.functional.linear(self.ln_f(x), self.tok.weight)


def batch(step, batch_size=MICRO_BATCH, seq_len=SEQ_LEN, vocab=VOCAB):
    """Token ids [b, s] and next-token targets [s, b], the same for every run."""
    g = torch.Generator().manual_seed(1000 + step)
    data = torch.randint(vocab, (batch_size, seq_len + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].t().contiguous()


def loss_fn(logits, targets):
    return nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
