"""Models written the usual ways, for the zoo test (test_zoo.py) and the
issue's reproductions: a GPT block as people write it (``q.view(b, s, a,
d).transpose(1, 2)``, ``q @ k.transpose(-2, -1)``), PyTorch's own
nn.TransformerEncoder and nn.TransformerDecoder, a Llama-style block (RMSNorm,
SwiGLU, rotary embedding, grouped-query attention by repeat_interleave), a
BERT-style encoder returning a dict and a small T5-style encoder-decoder
returning a tuple. Each takes ``ckpt``: None, "reentrant" or "non-reentrant"
(every block through torch.utils.checkpoint). Dims are small so that the whole
zoo trains in seconds; ``batch(name, step)`` gives each model's inputs."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

HIDDEN, HEADS, SEQ, VOCAB, BATCH, LAYERS = 64, 8, 128, 256, 4, 2


def call(block, ckpt, *args):
    """block(*args), through torch.utils.checkpoint when ckpt says so."""
    if ckpt is None:
        return block(*args)
    return checkpoint(block, *args, use_reentrant=ckpt == "reentrant")


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.drop = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(SEQ, SEQ)).view(1, 1, SEQ, SEQ))

    def forward(self, x):
        b, s, h = x.shape
        a, d = self.heads, h // self.heads
        q, k, v = self.qkv(x).split(h, dim=2)
        q = q.view(b, s, a, d).transpose(1, 2)
        k = k.view(b, s, a, d).transpose(1, 2)
        v = v.view(b, s, a, d).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(self.bias[:, :, :s, :s] == 0, float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, h)
        return self.drop(self.proj(y))


class GPTBlock(nn.Module):
    def __init__(self):
        super().__init__()
        hidden, heads = HIDDEN, HEADS
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(),
                                 nn.Linear(4 * hidden, hidden), nn.Dropout(0.1))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token and position embeddings, GPT blocks, a final LayerNorm and a head."""

    def __init__(self, ckpt=None):
        super().__init__()
        self.ckpt = ckpt
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.pos = nn.Embedding(SEQ, HIDDEN)
        self.blocks = nn.ModuleList(GPTBlock() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = call(block, self.ckpt, x)
        return self.head(self.ln_f(x))


class TorchStack(nn.Module):
    """An embedding, PyTorch's own layers (`stack`: nn.TransformerEncoder or
    nn.TransformerDecoder of `layer`s) and a head."""

    def __init__(self, ckpt, layer, stack):
        super().__init__()
        self.ckpt = ckpt
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.stack = stack(layer(HIDDEN, HEADS, 4 * HIDDEN, dropout=0.1, batch_first=True),
                           LAYERS)
        self.head = nn.Linear(HIDDEN, VOCAB)


class TorchEncoder(TorchStack):
    """nn.TransformerEncoder, its layers through checkpoint when asked."""

    def __init__(self, ckpt=None):
        super().__init__(ckpt, nn.TransformerEncoderLayer, nn.TransformerEncoder)

    def forward(self, idx):
        x = self.tok(idx)
        if self.ckpt is None:
            x = self.stack(x)
        else:
            for layer in self.stack.layers:
                x = call(layer, self.ckpt, x)
        return self.head(x)


class TorchDecoder(TorchStack):
    """nn.TransformerDecoder over an embedded memory, with a causal mask."""

    def __init__(self, ckpt=None):
        super().__init__(ckpt, nn.TransformerDecoderLayer, nn.TransformerDecoder)
        mask = torch.full((SEQ, SEQ), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx, memory_idx):
        x, memory = self.tok(idx), self.tok(memory_idx)
        for layer in self.stack.layers:
            x = call(layer, self.ckpt, x, memory, self.mask)
        return self.head(x)


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotary(x, cos, sin):
    """Rotates the two halves of x's last dimension (GPT-NeoX / Llama layout)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, kv_heads=2):
        super().__init__()
        hidden, heads = HIDDEN, HEADS
        self.heads, self.kv_heads, self.d = heads, kv_heads, hidden // heads
        self.norm1 = RMSNorm(hidden)
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.kv = nn.Linear(hidden, 2 * kv_heads * self.d, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.norm2 = RMSNorm(hidden)
        self.gate = nn.Linear(hidden, 3 * hidden, bias=False)
        self.up = nn.Linear(hidden, 3 * hidden, bias=False)
        self.down = nn.Linear(3 * hidden, hidden, bias=False)
        pos = torch.arange(SEQ, dtype=torch.float32)[:, None]
        freq = 1.0 / 10000 ** (torch.arange(0, self.d, 2, dtype=torch.float32) / self.d)
        angles = torch.cat((pos * freq, pos * freq), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x):
        b, s, h = x.shape
        y = self.norm1(x)
        q = self.q(y).view(b, s, self.heads, self.d).transpose(1, 2)
        k, v = self.kv(y).view(b, s, 2 * self.kv_heads, self.d).transpose(1, 2).chunk(2, dim=1)
        q, k = rotary(q, self.cos[:s], self.sin[:s]), rotary(k, self.cos[:s], self.sin[:s])
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        att = att + torch.full((s, s), float("-inf")).triu(1)
        y = (F.softmax(att.float(), dim=-1).type_as(q) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.o(y)
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    def __init__(self, ckpt=None):
        super().__init__()
        self.ckpt = ckpt
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(LlamaBlock() for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx)
        for layer in self.layers:
            x = call(layer, self.ckpt, x)
        return self.head(self.norm(x))


class BertLayer(nn.Module):
    """Post-LayerNorm self-attention and GELU MLP, with a padding mask."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(HIDDEN, HEADS, dropout=0.1, batch_first=True)
        self.ln1 = nn.LayerNorm(HIDDEN)
        self.ffn = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(),
                                 nn.Linear(4 * HIDDEN, HIDDEN))
        self.ln2 = nn.LayerNorm(HIDDEN)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, pad):
        x = self.ln1(x + self.drop(self.attn(x, x, x, key_padding_mask=pad,
                                             need_weights=False)[0]))
        return self.ln2(x + self.drop(self.ffn(x)))


class Bert(nn.Module):
    """Word, position and token-type embeddings, post-LN layers, a pooler; forward
    returns a dict (last_hidden_state, pooler_output)."""

    def __init__(self, ckpt=None):
        super().__init__()
        self.ckpt = ckpt
        self.word = nn.Embedding(VOCAB, HIDDEN)
        self.position = nn.Embedding(SEQ, HIDDEN)
        self.token_type = nn.Embedding(2, HIDDEN)
        self.ln = nn.LayerNorm(HIDDEN)
        self.layers = nn.ModuleList(BertLayer() for _ in range(LAYERS))
        self.pooler = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, idx, types):
        pad = idx == 0
        x = self.word(idx) + self.position(torch.arange(idx.shape[1])) + self.token_type(types)
        x = self.ln(x)
        for layer in self.layers:
            x = call(layer, self.ckpt, x, pad)
        return dict(last_hidden_state=x, pooler_output=torch.tanh(self.pooler(x[:, 0])))


class T5Attention(nn.Module):
    """T5's attention: no bias, no scaling, an additive position bias."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.v = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.o = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x, kv, bias):
        b, s, h = x.shape
        d = h // HEADS
        q = self.q(x).view(b, s, HEADS, d).transpose(1, 2)
        k = self.k(kv).view(b, -1, HEADS, d).transpose(1, 2)
        v = self.v(kv).view(b, -1, HEADS, d).transpose(1, 2)
        att = F.softmax(torch.matmul(q, k.transpose(3, 2)) + bias, dim=-1)
        return self.o(torch.matmul(att, v).transpose(1, 2).reshape(b, s, h))


class T5Layer(nn.Module):
    def __init__(self, cross):
        super().__init__()
        self.norm1, self.self_attn = RMSNorm(HIDDEN), T5Attention()
        self.cross = cross
        if cross:
            self.norm_x, self.cross_attn = RMSNorm(HIDDEN), T5Attention()
        self.norm2 = RMSNorm(HIDDEN)
        self.wi = nn.Linear(HIDDEN, 4 * HIDDEN, bias=False)
        self.wo = nn.Linear(4 * HIDDEN, HIDDEN, bias=False)

    def forward(self, x, bias, memory=None):
        y = self.norm1(x)
        x = x + self.self_attn(y, y, bias)
        if self.cross:
            x = x + self.cross_attn(self.norm_x(x), memory, 0.0)
        return x + self.wo(F.relu(self.wi(self.norm2(x))))


class T5(nn.Module):
    """A shared embedding, an encoder and a causal decoder with cross-attention
    and a learned position bias; forward returns (logits, encoder output)."""

    def __init__(self, ckpt=None):
        super().__init__()
        self.ckpt = ckpt
        self.shared = nn.Embedding(VOCAB, HIDDEN)
        self.bias = nn.Embedding(2 * SEQ, HEADS)
        self.encoder = nn.ModuleList(T5Layer(False) for _ in range(LAYERS))
        self.enc_norm = RMSNorm(HIDDEN)
        self.decoder = nn.ModuleList(T5Layer(True) for _ in range(LAYERS))
        self.dec_norm = RMSNorm(HIDDEN)

    def position_bias(self, s):
        rel = torch.arange(s)[None, :] - torch.arange(s)[:, None] + SEQ
        return self.bias(rel).permute(2, 0, 1)[None]

    def forward(self, src, tgt):
        bias = self.position_bias(src.shape[1])
        x = self.shared(src)
        for layer in self.encoder:
            x = call(layer, self.ckpt, x, bias)
        memory = self.enc_norm(x)
        causal = bias + torch.full((tgt.shape[1],) * 2, float("-inf")).triu(1)
        y = self.shared(tgt)
        for layer in self.decoder:
            y = call(layer, self.ckpt, y, causal, memory)
        return F.linear(self.dec_norm(y), self.shared.weight), memory


def configure(**dims):
    """Sets the zoo's dims (hidden, heads, seq, vocab, batch, layers) for the models
    made from now on: the issue's reproductions use hidden 256, sequence 128."""
    for name, value in dims.items():
        globals()[name.upper()] = value


class SharedGPT(GPT):
    """Weight sharing: block 0 called twice, before and after block 1."""

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in (self.blocks[0], self.blocks[1], self.blocks[0]):
            x = call(block, self.ckpt, x)
        return self.head(self.ln_f(x))


class FrozenGPT(GPT):
    """Fine-tuning: frozen embeddings and block 0, run under torch.no_grad."""

    def __init__(self, ckpt=None):
        super().__init__(ckpt)
        for m in (self.tok, self.pos, self.blocks[0]):
            m.requires_grad_(False)

    def forward(self, idx):
        with torch.no_grad():
            x = self.blocks[0](self.tok(idx) + self.pos(torch.arange(idx.shape[1])))
        return self.head(self.ln_f(call(self.blocks[1], self.ckpt, x)))


MODELS = dict(gpt=GPT, encoder=TorchEncoder, decoder=TorchDecoder, llama=Llama, bert=Bert, t5=T5,
              shared=SharedGPT, frozen=FrozenGPT,
              bf16=lambda ckpt=None: GPT(ckpt).to(torch.bfloat16))


def batch(name, step):
    """The inputs of model `name` at `step` (a tuple) and its targets."""
    g = torch.Generator().manual_seed(100 + step)
    ids = lambda: torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)  # noqa: E731
    targets = ids()
    if name == "decoder" or name == "t5":
        return (ids(), ids()), targets
    if name == "bert":
        idx = ids()
        idx[:, -3:] = 0  # padding
        return (idx, (torch.arange(SEQ) >= SEQ // 2).long().expand(BATCH, SEQ)), targets
    return (ids(),), targets


def loss_of(name, out, targets):
    """A scalar loss of each model's output (a tensor, a dict or a tuple)."""
    if name == "bert":
        h = out["last_hidden_state"]
        return h.float().pow(2).mean() + out["pooler_output"].float().sum() * 1e-3
    if name == "t5":
        out = out[0]
    return F.cross_entropy(out.float().reshape(-1, out.shape[-1]), targets.reshape(-1))
