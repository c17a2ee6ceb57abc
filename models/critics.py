"""One critic per user, all stored as stacked tensors with a leading user dimension.

Critic u: x (F) -> LeakyReLU(x W1_u + b1_u) -> LeakyReLU(. W2_u + b2_u) -> . w3_u + b3_u (scalar).
Training sums the per-user losses; since user u's loss depends only on user u's parameters, the
gradient of the sum is each user's own gradient, and `BatchedAdam` (elementwise, per-user step
counters, updates only the users in the step) makes one batched step equal to a Python loop of
per-user Adam steps (`tests/models/test_critics.py` checks this against `SingleCritic`).
Kinds: "wgan" (WGAN-GP, Gulrajani et al. 2017: E_gen[D] - E_real[D] + lambda_gp E[(|grad D(x^)|
- 1)^2], x^ interpolated in feature space) and "bce" (PateGAIL's GAIL discriminator).
Reward R_u(s, a) = sigmoid(D_u(s, a)) in [0, 1].
Optional spectral norm: W / sigma(W), sigma from one power iteration per training step per user.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SLOPE = 0.2


def _uniform(gen: torch.Generator, shape: tuple[int, ...], bound: float) -> torch.Tensor:
    return (torch.rand(shape, generator=gen) * 2 - 1) * bound


def _normalize(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


class BatchedCritics(nn.Module):
    def __init__(self, n_users: int, in_dim: int, hidden: int, gen: torch.Generator,
                 spectral_norm: bool = False):
        super().__init__()
        u, f, h = n_users, in_dim, hidden
        self.n_users, self.spectral = n_users, spectral_norm
        self.w1 = nn.Parameter(_uniform(gen, (u, f, h), f ** -0.5))
        self.b1 = nn.Parameter(_uniform(gen, (u, h), f ** -0.5))
        self.w2 = nn.Parameter(_uniform(gen, (u, h, h), h ** -0.5))
        self.b2 = nn.Parameter(_uniform(gen, (u, h), h ** -0.5))
        self.w3 = nn.Parameter(_uniform(gen, (u, h), h ** -0.5))
        self.b3 = nn.Parameter(_uniform(gen, (u,), h ** -0.5))
        self.register_buffer("sn_u1", _normalize(torch.randn((u, f), generator=gen)))
        self.register_buffer("sn_u2", _normalize(torch.randn((u, h), generator=gen)))

    def _sn(self, w: torch.Tensor, buf: torch.Tensor, users: torch.Tensor,
            update: bool) -> torch.Tensor:
        """w (A, m, n) divided by its per-user top singular value (power iteration)."""
        u = buf[users]
        with torch.no_grad():
            v = _normalize(torch.einsum("amn,am->an", w, u))
            if update:
                u = _normalize(torch.einsum("amn,an->am", w, v))
                buf[users] = u
        sigma = torch.einsum("am,amn,an->a", u, w, v)
        return w / sigma[:, None, None]

    def forward(self, x: torch.Tensor, users: torch.Tensor | None = None,
                update_sn: bool = False) -> torch.Tensor:
        """D_u(x). x: (A, n, F) per-user inputs, or (n, F) shared by all selected users.

        users: (A,) indices of the critics to apply (default all). Returns (A, n).
        """
        if users is None:
            users = torch.arange(self.n_users)
        w1, w2 = self.w1[users], self.w2[users]
        if self.spectral:
            w1 = self._sn(w1, self.sn_u1, users, update_sn)
            w2 = self._sn(w2, self.sn_u2, users, update_sn)
        h = torch.matmul(x, w1) + self.b1[users][:, None, :]  # shared x broadcasts over A
        h = F.leaky_relu(h, SLOPE)
        h = F.leaky_relu(torch.baddbmm(self.b2[users][:, None, :], h, w2), SLOPE)
        return torch.einsum("anh,ah->an", h, self.w3[users]) + self.b3[users][:, None]


def sample_batches(real: torch.Tensor, counts: torch.Tensor, generated: torch.Tensor,
                   users: torch.Tensor, batch: int, gen: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-user minibatches: real (A, b, F) from each user's own pairs, generated (A, b, F) from
    the shared public batch, and interpolation weights (A, b, 1)."""
    a = users.shape[0]
    ridx = (torch.rand((a, batch), generator=gen) * counts[users][:, None]).long()
    real_b = real[users[:, None], ridx]
    gen_b = generated[torch.randint(generated.shape[0], (a, batch), generator=gen)]
    alpha = torch.rand((a, batch, 1), generator=gen)
    return real_b, gen_b, alpha


def critic_losses(critic, real_b: torch.Tensor, gen_b: torch.Tensor, alpha: torch.Tensor,
                  kind: str, lambda_gp: float, **kw) -> torch.Tensor:
    """(A,) per-user losses; `critic(x, **kw)` maps (A, b, F) -> (A, b)."""
    d_real, d_gen = critic(real_b, **kw), critic(gen_b, **kw)
    if kind == "bce":
        return F.softplus(-d_real).mean(1) + F.softplus(d_gen).mean(1)
    x_hat = (alpha * real_b + (1 - alpha) * gen_b).requires_grad_(True)
    (grad,) = torch.autograd.grad(critic(x_hat, **kw).sum(), x_hat, create_graph=True)
    gp = ((grad.norm(dim=-1) - 1) ** 2).mean(1)
    return d_gen.mean(1) - d_real.mean(1) + lambda_gp * gp


@dataclass
class BatchedAdam:
    """Adam over stacked per-user parameters; a step updates only the given users."""

    params: list[nn.Parameter]
    lr: float = 1e-3
    betas: tuple[float, float] = (0.5, 0.9)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = torch.zeros(self.params[0].shape[0], dtype=torch.long)

    @torch.no_grad()
    def step(self, users: torch.Tensor) -> None:
        b1, b2 = self.betas
        self.t[users] += 1
        t = self.t[users].double()
        c1, c2 = (1 - b1 ** t).float(), (1 - b2 ** t).float()
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            g = p.grad[users]
            mu = m[users].mul_(b1).add_(g, alpha=1 - b1)
            vu = v[users].mul_(b2).addcmul_(g, g, value=1 - b2)
            m[users], v[users] = mu, vu
            shape = (-1,) + (1,) * (p.dim() - 1)
            p[users] -= self.lr * (mu / c1.view(shape)) / ((vu / c2.view(shape)).sqrt() + self.eps)
            p.grad = None

    def state_dict(self) -> dict:
        return {"m": self.m, "v": self.v, "t": self.t}

    def load_state_dict(self, sd: dict) -> None:
        self.m = [x.clone() for x in sd["m"]]
        self.v = [x.clone() for x in sd["v"]]
        self.t = sd["t"].clone()


def critic_step(critics: BatchedCritics, opt: BatchedAdam, real: torch.Tensor,
                counts: torch.Tensor, generated: torch.Tensor, users: torch.Tensor, batch: int,
                kind: str, lambda_gp: float, gen: torch.Generator) -> torch.Tensor:
    """One optimisation step of every critic in `users` at once; returns (A,) losses."""
    real_b, gen_b, alpha = sample_batches(real, counts, generated, users, batch, gen)
    losses = critic_losses(critics, real_b, gen_b, alpha, kind, lambda_gp,
                           users=users, update_sn=True)
    critics.zero_grad(set_to_none=True)
    losses.sum().backward()
    opt.step(users)
    return losses.detach()


class SingleCritic(nn.Module):
    """One user's critic as an ordinary module (the per-user-loop reference and benchmark)."""

    def __init__(self, critics: BatchedCritics, u: int):
        super().__init__()
        for name in ("w1", "b1", "w2", "b2", "w3", "b3"):
            setattr(self, name, nn.Parameter(getattr(critics, name)[u].detach().clone()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.leaky_relu(x @ self.w1 + self.b1, SLOPE)
        h = F.leaky_relu(h @ self.w2 + self.b2, SLOPE)
        return h @ self.w3 + self.b3


@dataclass
class Moments:
    """Per-sample sums over users: what ranks all-reduce. sum, sumsq: (B,); count: users."""

    sum: torch.Tensor
    sumsq: torch.Tensor
    count: int

    def merge(self, other: Moments) -> Moments:
        return Moments(self.sum + other.sum, self.sumsq + other.sumsq, self.count + other.count)


@torch.no_grad()
def critic_rewards(critics: BatchedCritics, features: torch.Tensor, users: torch.Tensor,
                   chunk_elems: int = 1 << 24) -> torch.Tensor:
    """(A, B) rewards R_u = sigmoid(D_u(x)) of the users in `users` on a shared batch."""
    hidden = critics.w1.shape[-1]
    step = max(1, chunk_elems // max(1, features.shape[0] * hidden))
    return torch.cat([torch.sigmoid(critics(features, users[i:i + step]))
                      for i in range(0, users.shape[0], step)])


@torch.no_grad()
def local_moments(critics: BatchedCritics, features: torch.Tensor, users: torch.Tensor,
                  chunk_elems: int = 1 << 24) -> Moments:
    """Seam for distribution: this rank's sum and sum of squares of its users' rewards.

    Chunked over users so memory stays O(chunk) at Telecom scale. Ranks all-reduce
    (sum, sumsq, count) and then call one aggregation scheme with the merged Moments.
    """
    b = features.shape[0]
    s, q = torch.zeros(b, dtype=torch.float64), torch.zeros(b, dtype=torch.float64)
    hidden = critics.w1.shape[-1]
    step = max(1, chunk_elems // max(1, b * hidden))
    for i in range(0, users.shape[0], step):
        r = torch.sigmoid(critics(features, users[i:i + step])).double()
        s += r.sum(0)
        q += (r * r).sum(0)
    return Moments(s, q, int(users.shape[0]))
