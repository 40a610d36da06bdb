# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   course:
#     chapter: 98_toy_lm
# ---

# %% [markdown]
# # 98. A toy language model (for the checkpoint tests)

# %%
import torch
import torch.nn.functional as F
from torch import nn

# %% nbgrader={"grade": false, "grade_id": "Bigram", "locked": false, "schema_version": 3, "solution": true}
class Bigram(nn.Module):
    """A bigram language model.

    Attributes: `table` nn.Embedding(vocab_size, vocab_size): row a holds the logits of the token after a.
    forward(tokens (B, T) long) -> logits (B, T, vocab_size).
    """

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.table = nn.Embedding(vocab_size, vocab_size)
        ### END SOLUTION

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        return self.table(tokens)
        ### END SOLUTION

# %% [markdown]
# ## The longer run
#
# Text from a noisy cycle over 8 tokens: the next token is the successor 90% of the time.

# %% tags=["skip-grading", "hide-input"]
from attnkit.checkpoints import checkpoint

V = 8


def noisy_cycle(n: int, seed: int) -> torch.Tensor:
    """(n,) tokens: each the successor of the last (mod V), or a random one with probability 0.1."""
    gen = torch.Generator().manual_seed(seed)
    out = [0]
    for _ in range(n - 1):
        jump = torch.rand((), generator=gen).item() < 0.1
        out.append(torch.randint(V, (), generator=gen).item() if jump else (out[-1] + 1) % V)
    return torch.tensor(out)


TRAIN, VALID = noisy_cycle(2000, seed=1), noisy_cycle(500, seed=2)


def build() -> nn.Module:
    return Bigram(V)


def evaluate(model: nn.Module) -> dict:
    """Validation cross-entropy (nats per token) and next-token accuracy."""
    logits = model(VALID[None, :-1])[0]                                  # (T, V)
    return {"val_loss": F.cross_entropy(logits, VALID[1:]).item(),
            "val_acc": (logits.argmax(-1) == VALID[1:]).float().mean().item()}


@checkpoint("98_toy_lm", build=build, evaluate=evaluate, steps=200)
def bigram_lm(model: nn.Module, steps: int, device: torch.device, lr: float = 0.1) -> list[dict]:
    """Full-batch Adam on the training text; the log holds the loss every 50 steps."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    x, y = TRAIN[None, :-1].to(device), TRAIN[1:].to(device)
    log = []
    for step in range(1, steps + 1):
        loss = F.cross_entropy(model(x)[0], y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            log.append({"step": step, "loss": round(loss.item(), 5)})
    return log

# %% tags=["skip-grading", "hide-input"]
short = build()
bigram_lm(short, steps=5, device=torch.device("cpu"))
print("short run:", evaluate(short))
