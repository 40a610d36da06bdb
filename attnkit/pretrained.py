"""The field's weights in the course's classes: GPT-2 into chapter 5's `GPT`, BERT around chapter 6's embeddings.

    from attnkit.pretrained import load_gpt2, load_bert, max_logit_difference

    gpt = load_gpt2(GPT, "gpt2")                    # your class, built at GPT-2 small's sizes (needs the internet)
    gpt = load_gpt2(GPT, hf_model)                  # or a transformers GPT-2 already in memory, or its state dict
    bert = load_bert(BertEmbeddings, "bert-base-uncased")   # attnkit's `Bert` around your embeddings

A loader touches your module only through the attribute names its docstring gives
(`tok_embed`, `blocks[i].attn.w_q`, `mlp[0]`, `norm`, ...) and `nn.Module`'s own members.

What GPT-2 needs beyond chapter 5's class, and how the loader gives it:
- GPT-2 stores its projections as `Conv1D` weights, (in, out): the loader transposes them, and splits
  the fused `c_attn` into `w_q, w_k, w_v`.
- GPT-2's GELU is the tanh approximation (`gelu_new`). The loader sets `approximate="tanh"` on each
  block's `mlp[1]` (the `nn.GELU()` the docstring names). A forward that computes its GELU without
  `mlp[1]` does not see that switch: call it inside `with gelu_approximation("tanh"):`.
- The head is tied to the token embedding (`tie=True` shares the parameter, as GPT-2 does).
- LayerNorm eps is GPT-2's `layer_norm_epsilon` (1e-5, PyTorch's default): set on each `nn.LayerNorm`.

Chapter 6's graded class is `BertEmbeddings`; its `TinyBert` is pre-norm with a final LayerNorm, and
BERT is post-norm with none, so BERT's weights cannot give BERT's function in `TinyBert`. `load_bert`
returns `Bert`: TinyBert's layout (`embed`, `layers`, `mlm_head`, `nsp_head`) around your
`BertEmbeddings`, with PyTorch's `nn.TransformerEncoderLayer` in BERT's post-norm order
(`norm_first=False`), LayerNorm eps 1e-12, the exact (erf) GELU, the pooler (`nsp_head[0:2]`) and
the MLM decoder tied to your token embedding.

`transformers` is needed only to fetch weights by name; a model or state dict from anywhere else works.
"""
from __future__ import annotations

import contextlib
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

GPT2_ACTIVATIONS = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}


# ---------------------------------------------------------------- reading a source
def _state_and_config(source: Any, fetch) -> tuple[dict[str, torch.Tensor], Any]:
    """(state dict, config or None) of a transformers model, a state dict, or a hub name (fetched)."""
    if isinstance(source, str):
        source = fetch(source)
    if isinstance(source, Mapping):
        return dict(source), None
    if hasattr(source, "state_dict") and hasattr(source, "config"):
        return source.state_dict(), source.config
    raise TypeError(f"expected a transformers model, a state dict or a model name, got {type(source).__name__}")


def _strip(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The keys under `prefix` (a wrapper model's `transformer.` or `bert.`) without it; others kept."""
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state.items()}


def _copy(param: torch.Tensor, value: torch.Tensor, name: str) -> None:
    if tuple(param.shape) != tuple(value.shape):
        raise ValueError(f"{name}: the model has shape {tuple(param.shape)}, the weights {tuple(value.shape)}")
    with torch.no_grad():
        param.copy_(value.to(param.dtype))


def _linear(layer: nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None, name: str) -> None:
    _copy(layer.weight, weight, f"{name}.weight")
    if bias is not None:
        if layer.bias is None:
            raise ValueError(f"{name} has no bias, the weights have one")
        _copy(layer.bias, bias, f"{name}.bias")


def _norm(norm: nn.LayerNorm, state: dict, key: str, eps: float, name: str) -> None:
    _copy(norm.weight, state[f"{key}.weight"], f"{name}.weight")
    _copy(norm.bias, state[f"{key}.bias"], f"{name}.bias")
    norm.eps = eps


def _layers(state: dict, prefix: str) -> int:
    """How many numbered layers `prefix{i}.` the state dict holds."""
    n = 0
    while any(k.startswith(f"{prefix}{n}.") for k in state):
        n += 1
    return n


def _config_value(config: Any, name: str, given: Any, default: Any = None) -> Any:
    value = given if given is not None else getattr(config, name, default) if config is not None else default
    if value is None:
        raise ValueError(f"a bare state dict does not say {name}: pass it (e.g. {name}=12)")
    return value


@contextlib.contextmanager
def gelu_approximation(approximate: str = "tanh"):
    """Inside the block, every `torch.nn.functional.gelu` call (and so every `nn.GELU`) uses `approximate`.

    For a model whose forward calls `F.gelu` itself, where `load_gpt2`'s switch on `mlp[1]` cannot
    reach. The original function is restored on exit.
    """
    original = F.gelu

    def gelu(input: torch.Tensor, approximate_: str = "none", **kwargs) -> torch.Tensor:
        return original(input, approximate=approximate)

    F.gelu = gelu
    try:
        yield
    finally:
        F.gelu = original


# ---------------------------------------------------------------- GPT-2
def _fetch_gpt2(name: str):
    from transformers import GPT2LMHeadModel
    return GPT2LMHeadModel.from_pretrained(name)


def load_gpt2(model: type[nn.Module] | nn.Module, source: Any, *, n_heads: int | None = None,
              tie: bool = True, activation: str | None = None, eps: float | None = None) -> nn.Module:
    """GPT-2's weights in chapter 5's `GPT`; returns the model in eval mode.

    `model`: your `GPT` class (built at the source's sizes: `GPT(vocab_size=, d_model=, n_heads=,
    d_ff=, n_layers=, max_len=)`) or an instance of the right sizes. `source`: a transformers
    `GPT2LMHeadModel` or `GPT2Model`, a state dict of either (then give `n_heads`), or a hub name
    such as "gpt2" (fetched with transformers: needs the internet). `tie` shares the head with the
    token embedding, as GPT-2 does; otherwise the head gets a copy. `activation` ("gelu_new" or
    "gelu") and `eps` override the config's (defaults for a bare state dict: GPT-2's).
    """
    state, config = _state_and_config(source, _fetch_gpt2)
    state = _strip(state, "transformer.")
    n_layers = _layers(state, "h.")
    vocab, d_model = state["wte.weight"].shape
    max_len = state["wpe.weight"].shape[0]
    d_ff = state["h.0.mlp.c_fc.weight"].shape[1] if n_layers else 4 * d_model
    activation = activation or (getattr(config, "activation_function", "gelu_new") if config else "gelu_new")
    if activation not in GPT2_ACTIVATIONS:
        raise ValueError(f"activation {activation!r}: the course's GPT has a GELU ({', '.join(GPT2_ACTIVATIONS)})")
    eps = _config_value(config, "layer_norm_epsilon", eps, 1e-5)
    if isinstance(model, type):
        heads = _config_value(config, "n_head", n_heads)
        model = model(vocab_size=vocab, d_model=d_model, n_heads=heads, d_ff=d_ff, n_layers=n_layers,
                      max_len=max_len)
    if len(model.blocks) != n_layers:
        raise ValueError(f"the model has {len(model.blocks)} blocks, the weights {n_layers} layers")

    _copy(model.tok_embed.weight, state["wte.weight"], "tok_embed.weight")
    _copy(model.pos_embed.weight, state["wpe.weight"], "pos_embed.weight")
    for i, block in enumerate(model.blocks):
        p, name = f"h.{i}.", f"blocks[{i}]"
        _norm(block.ln1, state, p + "ln_1", eps, f"{name}.ln1")
        _norm(block.ln2, state, p + "ln_2", eps, f"{name}.ln2")
        # Conv1D keeps (in, out): nn.Linear's weight is its transpose; c_attn holds q, k, v side by side
        w_q, w_k, w_v = state[p + "attn.c_attn.weight"].t().chunk(3, dim=0)  # each (D, D)
        b_q, b_k, b_v = state[p + "attn.c_attn.bias"].chunk(3)              # each (D,)
        attn = block.attn
        _linear(attn.w_q, w_q, b_q, f"{name}.attn.w_q")
        _linear(attn.w_k, w_k, b_k, f"{name}.attn.w_k")
        _linear(attn.w_v, w_v, b_v, f"{name}.attn.w_v")
        _linear(attn.w_o, state[p + "attn.c_proj.weight"].t(), state[p + "attn.c_proj.bias"], f"{name}.attn.w_o")
        _linear(block.mlp[0], state[p + "mlp.c_fc.weight"].t(), state[p + "mlp.c_fc.bias"], f"{name}.mlp[0]")
        _linear(block.mlp[2], state[p + "mlp.c_proj.weight"].t(), state[p + "mlp.c_proj.bias"], f"{name}.mlp[2]")
        if not isinstance(block.mlp[1], nn.GELU):
            raise TypeError(f"{name}.mlp[1] is {type(block.mlp[1]).__name__}, not the nn.GELU the docstring names")
        block.mlp[1].approximate = GPT2_ACTIVATIONS[activation]
    _norm(model.ln_f, state, "ln_f", eps, "ln_f")
    if tie:
        model.head.weight = model.tok_embed.weight
    else:
        _copy(model.head.weight, state.get("lm_head.weight", state["wte.weight"]), "head.weight")
    return model.eval()


# ---------------------------------------------------------------- BERT
def _gelu(x: torch.Tensor) -> torch.Tensor:
    """The exact GELU as a plain function: nn.TransformerEncoderLayer then takes its Python path, the
    same operations as transformers' BERT (bit for bit on a CPU), not its fused inference kernel."""
    return F.gelu(x)


class Bert(nn.Module):
    """BERT (post-norm) around chapter 6's `BertEmbeddings`: TinyBert's layout in BERT's layer order.

    Attributes: `embed` (your BertEmbeddings), `layers` nn.ModuleList of nn.TransformerEncoderLayer
    (norm_first=False: LayerNorm after each residual sum, as in BERT; the exact GELU), `mlm_head` = nn.Sequential(
    Linear, GELU, LayerNorm, Linear) (BERT's transform and decoder) or None, `nsp_head` =
    nn.Sequential(Linear, Tanh, Linear) (BERT's pooler and next-sentence classifier) or None.
    There is no final norm: a post-norm layer ends in one.
    """

    def __init__(self, embed: nn.Module, vocab_size: int, d_model: int, n_layers: int, n_heads: int,
                 d_ff: int, dropout: float = 0.1, eps: float = 1e-12, mlm: bool = True, nsp: bool = True):
        super().__init__()
        self.embed = embed
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, activation=_gelu, layer_norm_eps=eps,
                                       batch_first=True, norm_first=False)
            for _ in range(n_layers))
        self.mlm_head = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.LayerNorm(d_model, eps=eps),
                                      nn.Linear(d_model, vocab_size)) if mlm else None
        self.nsp_head = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh(), nn.Linear(d_model, 2)) if nsp else None

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """All hidden states: n_layers + 1 tensors (B, T, D), index 0 = embeddings.

        attention_mask (B, T): 1 = a token, 0 = padding (transformers' convention).
        """
        pad = None if attention_mask is None else attention_mask == 0          # (B, T), True = ignore
        states = [self.embed(input_ids, token_type_ids)]
        for layer in self.layers:
            states.append(layer(states[-1], src_key_padding_mask=pad))        # (B, T, D)
        return states

    def mlm_logits(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        """(B, T, V): the masked-LM head on the last hidden state."""
        return self.mlm_head(self(input_ids, token_type_ids, attention_mask)[-1])

    def nsp_logits(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        """(B, 2): the next-sentence head on [CLS] (index 1 = "B is random", as in BERT)."""
        return self.nsp_head(self(input_ids, token_type_ids, attention_mask)[-1][:, 0])


def _fetch_bert(name: str):
    from transformers import BertForPreTraining
    return BertForPreTraining.from_pretrained(name)


def _bert_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' current names: old checkpoints say LayerNorm.gamma/beta."""
    state = _strip(state, "bert.")
    return {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
            for k, v in state.items()}


def load_bert(embeddings: type[nn.Module] | nn.Module, source: Any, *, n_heads: int | None = None,
              tie: bool = True, eps: float | None = None) -> Bert:
    """BERT's weights in `Bert` around chapter 6's `BertEmbeddings`; returns it in eval mode.

    `embeddings`: your `BertEmbeddings` class (built as `BertEmbeddings(vocab_size, d_model,
    max_len=, n_segments=, dropout=, eps=)`) or an instance of the right sizes and eps. `source`: a
    transformers `BertModel`, `BertForMaskedLM` or `BertForPreTraining`, a state dict of one (then
    give `n_heads`), or a hub name such as "bert-base-uncased" (fetched: needs the internet). The
    heads the source has are loaded (`mlm_head`, `nsp_head`), the others are None. `tie` shares the
    MLM decoder with the token embedding, as BERT does.
    """
    state, config = _state_and_config(source, _fetch_bert)
    state = _bert_names(state)
    n_layers = _layers(state, "encoder.layer.")
    vocab, d_model = state["embeddings.word_embeddings.weight"].shape
    max_len = state["embeddings.position_embeddings.weight"].shape[0]
    n_segments = state["embeddings.token_type_embeddings.weight"].shape[0]
    d_ff = state["encoder.layer.0.intermediate.dense.weight"].shape[0]
    eps = _config_value(config, "layer_norm_eps", eps, 1e-12)
    heads = _config_value(config, "num_attention_heads", n_heads)
    act = getattr(config, "hidden_act", "gelu") if config is not None else "gelu"
    if act != "gelu":
        raise ValueError(f"hidden_act {act!r}: Bert's layers use the exact GELU ('gelu')")
    dropout = getattr(config, "hidden_dropout_prob", 0.1) if config is not None else 0.1
    if isinstance(embeddings, type):
        embeddings = embeddings(vocab, d_model, max_len=max_len, n_segments=n_segments, dropout=dropout, eps=eps)
    elif abs(embeddings.norm.eps - eps) > 1e-20:
        raise ValueError(f"the embeddings' norm has eps {embeddings.norm.eps}, the weights {eps}: "
                         f"build them with eps={eps}")
    has_mlm = "cls.predictions.transform.dense.weight" in state
    has_nsp = "pooler.dense.weight" in state and "cls.seq_relationship.weight" in state
    model = Bert(embeddings, vocab, d_model, n_layers, heads, d_ff, dropout, eps, mlm=has_mlm, nsp=has_nsp)

    e = "embeddings."
    _copy(model.embed.token.weight, state[e + "word_embeddings.weight"], "embed.token.weight")
    _copy(model.embed.segment.weight, state[e + "token_type_embeddings.weight"], "embed.segment.weight")
    _copy(model.embed.position.weight, state[e + "position_embeddings.weight"], "embed.position.weight")
    _copy(model.embed.norm.weight, state[e + "LayerNorm.weight"], "embed.norm.weight")
    _copy(model.embed.norm.bias, state[e + "LayerNorm.bias"], "embed.norm.bias")
    for i, layer in enumerate(model.layers):
        p, name = f"encoder.layer.{i}.", f"layers[{i}]"
        qkv = [state[f"{p}attention.self.{w}.weight"] for w in ("query", "key", "value")]
        _copy(layer.self_attn.in_proj_weight, torch.cat(qkv), f"{name}.self_attn.in_proj_weight")      # (3D, D)
        qkv_bias = [state[f"{p}attention.self.{w}.bias"] for w in ("query", "key", "value")]
        _copy(layer.self_attn.in_proj_bias, torch.cat(qkv_bias), f"{name}.self_attn.in_proj_bias")    # (3D,)
        _linear(layer.self_attn.out_proj, state[p + "attention.output.dense.weight"],
                state[p + "attention.output.dense.bias"], f"{name}.self_attn.out_proj")
        _norm(layer.norm1, state, p + "attention.output.LayerNorm", eps, f"{name}.norm1")
        _linear(layer.linear1, state[p + "intermediate.dense.weight"], state[p + "intermediate.dense.bias"],
                f"{name}.linear1")
        _linear(layer.linear2, state[p + "output.dense.weight"], state[p + "output.dense.bias"], f"{name}.linear2")
        _norm(layer.norm2, state, p + "output.LayerNorm", eps, f"{name}.norm2")
    if model.mlm_head is not None:
        c = "cls.predictions."
        _linear(model.mlm_head[0], state[c + "transform.dense.weight"], state[c + "transform.dense.bias"],
                "mlm_head[0]")
        _norm(model.mlm_head[2], state, c + "transform.LayerNorm", eps, "mlm_head[2]")
        bias = state.get(c + "bias", state.get(c + "decoder.bias"))
        if tie:
            model.mlm_head[3].weight = model.embed.token.weight
            _copy(model.mlm_head[3].bias, bias, "mlm_head[3].bias")
        else:
            _linear(model.mlm_head[3], state.get(c + "decoder.weight", state[e + "word_embeddings.weight"]),
                    bias, "mlm_head[3]")
    if model.nsp_head is not None:
        _linear(model.nsp_head[0], state["pooler.dense.weight"], state["pooler.dense.bias"], "nsp_head[0]")
        _linear(model.nsp_head[2], state["cls.seq_relationship.weight"], state["cls.seq_relationship.bias"],
                "nsp_head[2]")
    return model.eval()


# ---------------------------------------------------------------- checking
@torch.no_grad()
def max_logit_difference(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """The largest absolute difference between two logit tensors of the same shape."""
    if ours.shape != theirs.shape:
        raise ValueError(f"shapes differ: {tuple(ours.shape)} and {tuple(theirs.shape)}")
    return (ours.float() - theirs.float()).abs().max().item()
