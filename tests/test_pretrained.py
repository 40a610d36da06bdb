"""Do GPT-2's and BERT's weights give transformers' logits in the course's own classes?

Offline: a randomly initialised transformers GPT-2 and BERT of a small config (weights drawn
wide, so that a wrong GELU, eps or transpose shows), loaded into chapter 5's `GPT` and around
chapter 6's `BertEmbeddings`, as the reference solution and as the alternative one define them.
"""
from __future__ import annotations

import contextlib
import functools

import pytest
import torch

from attnkit.pretrained import gelu_approximation, load_bert, load_gpt2, max_logit_difference

transformers = pytest.importorskip(
    "transformers", reason="transformers (requirements-ci.txt) is not installed: the loaders are not checked")

TOL = 1e-5
V, D, H, L, T = 100, 64, 4, 2, 24


def _chapter(chapter: str, implementation: str):
    """The names a chapter's graded path defines: the reference as the graders run it, or the
    alternative spliced into the exercise notebook."""
    if implementation == "reference":
        from autograder.reference import load_reference
        return vars(load_reference(chapter))
    from course.alternatives import alternative_notebook
    from autograder.harness.worker import run_cells, seed_all
    cells = [{"cell_type": "code", "source": c.source} for c in alternative_notebook(chapter).cells
             if c.cell_type == "code" and "skip-grading" not in c.metadata.get("tags", [])]
    ns: dict = {"__name__": f"alternative_{chapter}"}
    seed_all(0)
    errors = run_cells(cells, set(), ns)
    assert not errors, errors[0]
    return ns


def _widen(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter moved by noise of std 0.2 around its init (LayerNorm gains near 1, not exactly 1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))
    return model.eval()


@pytest.fixture(scope="module")
def gpt2():
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=D, n_layer=L, n_head=H,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return _widen(transformers.GPT2LMHeadModel(cfg))


@pytest.fixture(scope="module")
def bert():
    cfg = transformers.BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                  intermediate_size=4 * D, max_position_embeddings=32, pad_token_id=0)
    torch.manual_seed(0)
    return _widen(transformers.BertForPreTraining(cfg))


@pytest.fixture(scope="module", params=["reference", "alternative"])
def ch05(request):
    return request.param, _chapter("05_gpt", request.param)


@pytest.fixture(scope="module", params=["reference", "alternative"])
def ch06(request):
    return request.param, _chapter("06_bert", request.param)


def _tokens(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (3, T), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_gpt2_gives_transformers_logits_in_the_chapters_gpt(gpt2, ch05):
    """GPT-2's weights in chapter 5's GPT (built from the class): the same logits, the cache too."""
    implementation, ns = ch05
    model = load_gpt2(ns["GPT"], gpt2)
    x = _tokens()
    theirs = gpt2(x).logits
    # the alternative computes its GELU with F.gelu, not through mlp[1]: the loader's switch cannot reach it
    with gelu_approximation("tanh") if implementation == "alternative" else contextlib.nullcontext():
        ours, caches = model(x)
        first, cache = model(x[:, :10])
        rest, _ = model(x[:, 10:], cache)
    assert max_logit_difference(ours, theirs) < TOL
    assert max_logit_difference(torch.cat([first, rest], 1), theirs) < TOL
    assert model.head.weight is model.tok_embed.weight, "the head is tied, as in GPT-2"


@torch.no_grad()
def test_gpt2_state_dict_loads_into_an_instance_untied(gpt2, ch05):
    """A bare state dict (n_heads given) into a GPT built by hand; tie=False copies the head."""
    implementation, ns = ch05
    model = ns["GPT"](vocab_size=V, d_model=D, n_heads=H, d_ff=4 * D, n_layers=L, max_len=32)
    load_gpt2(model, gpt2.state_dict(), tie=False)
    assert model.head.weight is not model.tok_embed.weight
    with gelu_approximation("tanh") if implementation == "alternative" else contextlib.nullcontext():
        ours = model(_tokens(2))[0]
    assert max_logit_difference(ours, gpt2(_tokens(2)).logits) < TOL


@torch.no_grad()
def test_each_switch_matters(gpt2):
    """Without the tanh GELU or with a wrong eps the logits differ: the test above can fail."""
    ns = _chapter("05_gpt", "reference")
    x, theirs = _tokens(), gpt2(_tokens()).logits
    exact = load_gpt2(ns["GPT"], gpt2, activation="gelu")
    assert max_logit_difference(exact(x)[0], theirs) > 10 * TOL
    loose = load_gpt2(ns["GPT"], gpt2, eps=1e-3)
    assert max_logit_difference(loose(x)[0], theirs) > 10 * TOL
    alternative = load_gpt2(_chapter("05_gpt", "alternative")["GPT"], gpt2)
    assert max_logit_difference(alternative(x)[0], theirs) > 10 * TOL, \
        "the alternative's F.gelu needs gelu_approximation (else the context manager is not needed)"


@torch.no_grad()
def test_bert_gives_transformers_logits_around_the_chapters_embeddings(bert, ch06):
    """BERT's weights around chapter 6's BertEmbeddings: the same MLM and NSP logits, hidden states,
    token types and padding included."""
    _, ns = ch06
    model = load_bert(ns["BertEmbeddings"], bert)
    x = _tokens()
    types = (torch.arange(T) >= T // 2).long().expand(3, T)
    mask = torch.ones(3, T, dtype=torch.long)
    mask[1, -5:] = 0
    out = bert(input_ids=x, token_type_ids=types, attention_mask=mask, output_hidden_states=True)
    states = model(x, types, mask)
    keep = mask.bool()
    assert len(states) == L + 1
    for ours, theirs in zip(states, out.hidden_states):
        assert max_logit_difference(ours[keep], theirs[keep]) < TOL
    assert max_logit_difference(model.mlm_head(states[-1])[keep], out.prediction_logits[keep]) < TOL
    assert max_logit_difference(model.nsp_logits(x, types, mask), out.seq_relationship_logits) < TOL
    assert model.mlm_head[3].weight is model.embed.token.weight


@torch.no_grad()
def test_a_bert_without_heads_and_an_old_checkpoints_names(bert, ch06):
    """BertModel's bare state dict (no heads) with LayerNorm gamma/beta names into an instance."""
    _, ns = ch06
    old = {"LayerNorm.weight": "LayerNorm.gamma", "LayerNorm.bias": "LayerNorm.beta"}
    state = {functools.reduce(lambda k, kv: k.replace(*kv), old.items(), k[len("bert."):]): v
             for k, v in bert.state_dict().items() if k.startswith("bert.") and "pooler" not in k}
    embed = ns["BertEmbeddings"](V, D, max_len=32)
    model = load_bert(embed, state, n_heads=H)
    assert model.mlm_head is None and model.nsp_head is None and model.embed is embed
    x = _tokens(3)
    assert max_logit_difference(model(x)[-1], bert.bert(x).last_hidden_state) < TOL


def test_clear_errors_on_wrong_sizes_and_missing_heads(gpt2, bert):
    ns5, ns6 = _chapter("05_gpt", "reference"), _chapter("06_bert", "reference")
    with pytest.raises(ValueError, match="n_head"):
        load_gpt2(ns5["GPT"], gpt2.state_dict())
    with pytest.raises(ValueError, match=r"tok_embed.weight: the model has shape \(50, 64\)"):
        load_gpt2(ns5["GPT"](vocab_size=50, d_model=D, n_heads=H, d_ff=4 * D, n_layers=L, max_len=32), gpt2)
    with pytest.raises(ValueError, match="build them with eps=1e-12"):
        load_bert(ns6["BertEmbeddings"](V, D, max_len=32, eps=1e-5), bert)


class _Tokenizer:
    """Stands in for a transformers tokenizer in the page cells' offline run: ids from characters."""

    mask_token_id = 3

    def encode(self, text: str) -> list[int]:
        return [ord(c) % V for c in text][:2]

    def decode(self, ids) -> str:
        return " ".join(map(str, ids.tolist()))

    def __call__(self, text: str, return_tensors: str = "pt") -> dict:
        ids = torch.tensor([[2, 5, 7, self.mask_token_id, 9]])
        return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [f"t{i}" for i in ids]


def _page_cell(chapter: str) -> str:
    from course.exercises import read_solution
    cells = [c for c in read_solution(chapter).cells if "ATTNKIT_FETCH_WEIGHTS" in c.source and c.cell_type == "code"]
    assert len(cells) == 1 and "skip-grading" in cells[0].metadata.get("tags", [])
    return cells[0].source


@pytest.mark.parametrize("chapter", ["05_gpt", "06_bert"])
def test_the_optional_page_cell_is_opt_in_and_runs(chapter, gpt2, bert, monkeypatch, capsys):
    """Without ATTNKIT_FETCH_WEIGHTS it fetches nothing; with it (the hub stubbed by the small random
    models) it loads them into the reference's classes and prints a logit difference under 1e-5."""
    source = _page_cell(chapter)
    ns = dict(_chapter(chapter, "reference"))
    monkeypatch.delenv("ATTNKIT_FETCH_WEIGHTS", raising=False)
    monkeypatch.setattr(transformers.GPT2LMHeadModel, "from_pretrained", lambda name: pytest.fail("fetched"))
    exec(compile(source, "<page cell>", "exec"), dict(ns))
    assert capsys.readouterr().out.startswith("Skipped: set FETCH = True")
    monkeypatch.setenv("ATTNKIT_FETCH_WEIGHTS", "1")
    monkeypatch.setattr(transformers.GPT2LMHeadModel, "from_pretrained", lambda name: gpt2)
    monkeypatch.setattr(transformers.BertForPreTraining, "from_pretrained", lambda name: bert)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda name: _Tokenizer())
    exec(compile(source, "<page cell>", "exec"), dict(ns))
    out = capsys.readouterr().out
    diff = float(out.split("largest logit difference from transformers: ")[1].split()[0])
    assert diff < TOL and ("[MASK] -> ['t" in out if chapter == "06_bert" else len(out.splitlines()) == 2)
