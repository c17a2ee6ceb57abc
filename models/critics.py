"""One critic per user, all stored as stacked tensors with a leading user dimension.

Critic u: x (F) -> LeakyReLU(x W1_u + b1_u) -> LeakyReLU(. W2_u + b2_u) -> . w3_u + b3_u (scalar).
Training sums the per-user losses; since user u's loss depends only on user u's parameters, the
gradient of the sum is each user's own gradient, and `BatchedAdam` (elementwise, per-user step
counters, updates only the users in the step) makes one batched step equal to a Python loop of
per-user Adam steps (`tests/models/test_critics.py` checks this against `SingleCritic`).
Kinds: "wgan" (WGAN-GP, Gulrajani et al. 2017: E_gen[D] - E_real[D] + lambda_gp E[(|grad D(x^)|
- 1)^2], x^ interpolated in feature space) and "bce" (PateGAIL's GAIL discriminator).
Reward R_u(s, a) = sigmoid(D_u(s, a)) in [0, 1].
Optional spectral norm: W / sigma(W), sigma from one power iteration per critic evaluation (a
training step evaluates each critic on its real, generated and interpolated rows: three iterations
for "wgan", two for "bce", exactly as three calls of `forward(update_sn=True)` would).

Speed (bench/bench_train.py). `forward` + autograd (`critic_losses`) is the readable reference;
the training loop uses two hand-written equivalents that give the same numbers up to the order of
float sums (tests/models/test_critics.py checks them against autograd and against per-user
modules):
- scoring (`local_moments`, `critic_rewards`): the generated pairs are shared by all users, so
  layer 1 of a chunk of users is ONE matrix product (users*(H+1), F+1) @ (F+1, B) with the biases
  folded in as an extra input row of ones; layers 2 and 3 are per-user products with the bias
  again folded in (the extra unit row survives LeakyReLU). Tiles of users x samples are sized to
  stay in the L2 cache, activations are updated in place; float32 throughout and float64 only
  for the per-sample sums. Repeated generated rows are scored once (bit-identical values).
- training (`critic_update`): the WGAN-GP loss and its parameter gradients in closed form
  instead of double backward. For the MLP, dD/dx = W1 (s1 * (W2 (s2 * w3))) with s the LeakyReLU
  slopes (1 or SLOPE, constant almost everywhere, as autograd treats them); the same vectors
  v2 = s2*w3 and v1 = s1*(W2 v2) are the backward pass of D, so the gradients of all three row
  groups (real, generated, interpolated) come from one product per weight matrix. Chunked over
  users (cache-sized), and each chunk's Adam update is applied right away (in place when the
  users are consecutive), which is exact because a user's loss reads only its own rows.
  The real and generated minibatches differ per user, so there is no shared product here.
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
        return self._sn_parts(w, buf, users, update)[0]

    def _sn_parts(self, w: torch.Tensor, buf: torch.Tensor, users: torch.Tensor, update: bool
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(w / sigma, sigma, u, v): sigma = u^T w v with u, v (A, m), (A, n) constants."""
        u = buf[users]
        with torch.no_grad():
            v = _normalize(torch.einsum("amn,am->an", w, u))
            if update:
                u = _normalize(torch.einsum("amn,an->am", w, v))
                buf[users] = u
        sigma = torch.einsum("am,amn,an->a", u, w, v)
        return w / sigma[:, None, None], sigma, u, v

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


def _as_slice(users: torch.Tensor) -> slice | None:
    """users as a slice when they are consecutive indices (then rows are views, not copies)."""
    n = users.shape[0]
    if n == 0:
        return None
    first = int(users[0])
    if not torch.equal(users, torch.arange(first, first + n)):
        return None
    return slice(first, first + n)


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
        """Update the rows `users` of every parameter from its .grad, then clear .grad."""
        rows = _as_slice(users)
        c1, c2 = self.tick(users if rows is None else rows)
        self.apply(users, [p.grad[users] for p in self.params], c1, c2, rows)
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def tick(self, sel: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor]:
        """Count one step for the users `sel`; their bias corrections (1 - beta^t) as float."""
        b1, b2 = self.betas
        self.t[sel] += 1
        t = self.t[sel].double()
        return (1 - b1 ** t).float(), (1 - b2 ** t).float()

    @torch.no_grad()
    def apply(self, users: torch.Tensor, grads: list[torch.Tensor], c1: torch.Tensor,
              c2: torch.Tensor, rows: slice | None = None) -> None:
        """Adam update of the rows `users` with `grads` (one (A, ...) tensor per parameter) and
        their bias corrections from `tick`; `rows`: the same users as a slice, updated in place
        through views (no gather/scatter)."""
        b1, b2 = self.betas
        sel = users if rows is None else rows
        for p, m, v, g in zip(self.params, self.m, self.v, grads, strict=True):
            mu = m[sel].mul_(b1).add_(g, alpha=1 - b1)
            vu = v[sel].mul_(b2).addcmul_(g, g, value=1 - b2)
            shape = (-1,) + (1,) * (p.dim() - 1)
            upd = self.lr * (mu / c1.view(shape)) / ((vu / c2.view(shape)).sqrt() + self.eps)
            if rows is None:
                m[users], v[users] = mu, vu
                p[users] -= upd
            else:  # mu, vu are views: m, v already hold them
                p[rows] -= upd

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
    return critic_update(critics, opt, real_b, gen_b, alpha, users, kind, lambda_gp)


STEP_TILE = 1 << 18  # hidden activations (elements) per user chunk of a training step


def _gmm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(c, g, n, k) @ (c, G, k, m) -> (c, g, n, m) with G = 1 (one weight for every row group,
    one product over g*n rows) or G = g (a weight per row group)."""
    c, g, n, k = x.shape
    if w.shape[1] == 1:
        return torch.bmm(x.reshape(c, g * n, k), w[:, 0]).view(c, g, n, -1)
    return torch.bmm(x.reshape(c * g, n, k), w.reshape(c * g, k, -1)).view(c, g, n, -1)


def _gram(q: torch.Tensor, r: torch.Tensor, per_group: bool) -> torch.Tensor:
    """sum over rows of q^T r: (c, g, n, k), (c, g, n, m) -> (c, k, m), or (c, g, k, m)."""
    c, g, n, k = q.shape
    if not per_group:
        return torch.bmm(q.reshape(c, g * n, k).transpose(1, 2), r.reshape(c, g * n, -1))
    return torch.bmm(q.reshape(c * g, n, k).transpose(1, 2),
                     r.reshape(c * g, n, -1)).view(c, g, k, -1)


def _slopes(z: torch.Tensor) -> torch.Tensor:
    """LeakyReLU'(z) = 1 where z > 0, else SLOPE (autograd's convention at 0), so that
    z * s is LeakyReLU(z) and g * s is autograd's backward, bit for bit (sign + clamp is
    several times faster than torch.where on CPU)."""
    return z.sign().clamp_(SLOPE, 1.0)


def _softplus_grad(x: torch.Tensor, g: float) -> torch.Tensor:
    """g * softplus'(x), written as autograd's softplus backward (beta 1, threshold 20)."""
    z = x.exp()
    return torch.where(x > 20, g, g * z / (z + 1))


def _chunk_losses_and_grads(critics: BatchedCritics, x: torch.Tensor, users: torch.Tensor,
                            wgan: bool, lambda_gp: float
                            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """x (c, g, b, F): row groups real, generated (and interpolated for wgan). Returns the (c,)
    losses of `critic_losses` and the gradients of their sum w.r.t. the rows `users` of
    (w1, b1, w2, b2, w3, b3), without autograd (see the module docstring)."""
    c, ng, b, _ = x.shape
    w1, w2 = critics.w1[users], critics.w2[users]
    b1, b2, w3, b3 = critics.b1[users], critics.b2[users], critics.w3[users], critics.b3[users]
    sn: list[tuple] = []
    if critics.spectral:  # one power iteration per evaluation, as forward(update_sn=True) does
        for _ in range(ng):
            sn.append((critics._sn_parts(w1, critics.sn_u1, users, True),
                       critics._sn_parts(w2, critics.sn_u2, users, True)))
        W1 = torch.stack([p[0][0] for p in sn], 1)  # (c, g, F, H)
        W2 = torch.stack([p[1][0] for p in sn], 1)
    else:
        W1, W2 = w1[:, None], w2[:, None]  # (c, 1, ., H): shared by all row groups
    # forward
    z1 = _gmm(x, W1).add_(b1[:, None, None, :])
    s1 = _slopes(z1)
    a1 = z1.mul_(s1)
    z2 = _gmm(a1, W2).add_(b2[:, None, None, :])
    s2 = _slopes(z2)
    a2 = z2.mul_(s2)
    a2_rg = a2[:, :2].reshape(c, 2 * b, -1)  # real and generated rows (a view)
    d = torch.baddbmm(b3[:, None, None], a2_rg, w3[:, :, None]).view(c, 2, b)
    if wgan:
        losses = d[:, 1].mean(1) - d[:, 0].mean(1)
        dd = torch.empty_like(d)
        dd[:, 0], dd[:, 1] = -1.0 / b, 1.0 / b
    else:
        losses = F.softplus(-d[:, 0]).mean(1) + F.softplus(d[:, 1]).mean(1)
        dd = torch.stack([-_softplus_grad(-d[:, 0], 1.0 / b), _softplus_grad(d[:, 1], 1.0 / b)], 1)
    # backward of D, row by row: v2 = dD/dz2 = s2 * (dd * w3) and v1 = dD/dz1 = s1 * (W2 v2)
    # (s = LeakyReLU' of z),
    # with dd = dLoss/dD on the real and generated rows and dd = 1 on the interpolated ones
    # (there v1 and v2 are the chain of dD/dx). Products are formed in autograd's order and the
    # bias gradients summed per row group as autograd does: under WGAN (dd = +-1/b) a bias
    # gradient can be exactly 0 in exact arithmetic, and Adam turns round-off there into steps.
    scale = dd[..., None] if ng == 2 else torch.cat([dd, dd.new_ones(c, 1, b)], 1)[..., None]
    v2 = (scale * w3[:, None, None, :]).mul_(s2)
    v1 = _gmm(v2, W2.transpose(-1, -2)).mul_(s1)
    gw3 = torch.bmm(dd.view(c, 1, 2 * b), a2_rg).squeeze(1)
    gb1 = v1[:, 0].sum(1) + v1[:, 1].sum(1)
    gb2 = v2[:, 0].sum(1) + v2[:, 1].sum(1)
    gb3 = dd[:, 0].sum(1) + dd[:, 1].sum(1)
    if wgan:  # gradient penalty on the interpolated rows: g = dD/dx = W1 v1
        W1x, W2x = W1[:, -1], W2[:, -1]
        grad = torch.bmm(v1[:, 2], W1x.transpose(1, 2))  # (c, b, F)
        norm = grad.norm(dim=-1)
        losses = losses + lambda_gp * ((norm - 1) ** 2).mean(1)
        coef = torch.where(norm > 0, (2.0 * lambda_gp / b) * (norm - 1) / norm, 0.0)
        cvec = grad.mul_(coef[..., None])  # dLoss/dg
        e1 = torch.bmm(cvec, W1x).mul_(s1[:, 2])  # dLoss/d(W2 v2)
        gw3 += torch.bmm(e1, W2x).mul_(s2[:, 2]).sum(1)
        x[:, 2] = cvec  # the penalty's rows of the W1 and W2 gradients (outer products
        a1[:, 2] = e1  # cvec v1^T and e1 v2^T) join the other rows' products below
    per_group = bool(sn)
    gw1, gw2 = _gram(x, v1, per_group), _gram(a1, v2, per_group)
    if per_group:  # through w / sigma(w): dL/dw = G / sigma - <G, w / sigma> / sigma u v^T
        def through(gw: torch.Tensor, k: int) -> torch.Tensor:
            out = torch.zeros_like(gw[:, 0])
            for j, parts in enumerate(sn):
                w_eff, sigma, u, v = parts[k]
                gj = gw[:, j]
                inner = (gj * w_eff).sum((1, 2)) / sigma
                out += gj / sigma[:, None, None] - inner[:, None, None] * (u[:, :, None]
                                                                           * v[:, None, :])
            return out

        gw1, gw2 = through(gw1, 0), through(gw2, 1)
    return losses, [gw1, gb1, gw2, gb2, gw3, gb3]


@torch.no_grad()
def critic_update(critics: BatchedCritics, opt: BatchedAdam, real_b: torch.Tensor,
                  gen_b: torch.Tensor, alpha: torch.Tensor, users: torch.Tensor, kind: str,
                  lambda_gp: float, tile: int = STEP_TILE) -> torch.Tensor:
    """One optimisation step of the critics `users` on given minibatches real_b, gen_b (A, b, F)
    and interpolation weights alpha (A, b, 1); returns the (A,) losses. Equals `critic_losses`
    + backward + `opt.step(users)` (with three/two power iterations under spectral norm, as
    `critic_losses` does), with closed-form gradients, chunked over users."""
    a, b, _ = real_b.shape
    wgan = kind == "wgan"
    ng = 3 if wgan else 2
    step = max(1, tile // (ng * b * critics.w1.shape[-1]))
    span = _as_slice(users)
    c1, c2 = opt.tick(users if span is None else span)
    losses = []
    for i in range(0, a, step):
        rb, gb = real_b[i:i + step], gen_b[i:i + step]
        parts = [rb, gb]
        if wgan:
            al = alpha[i:i + step]
            parts.append(al * rb + (1 - al) * gb)
        loss, grad = _chunk_losses_and_grads(critics, torch.stack(parts, 1), users[i:i + step],
                                             wgan, lambda_gp)
        losses.append(loss)
        rows = None if span is None else slice(span.start + i, span.start + i + len(loss))
        opt.apply(users[i:i + step], grad, c1[i:i + step], c2[i:i + step], rows)
        # exact: the later chunks read only their own users' rows
    return torch.cat(losses) if losses else torch.zeros(0)


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


SCORE_TILE = 1 << 19  # hidden activations (elements) per tile of users x samples (L2-sized)
SCORE_COLS = 512  # generated samples per tile


def _score_tiles(critics: BatchedCritics, features: torch.Tensor, users: torch.Tensor,
                 chunk_elems: int):
    """Yield (i, j, d): D_u(x) of users[i:i + a] on features[j:j + n] as (a, n), for tiles that
    cover users x samples. Biases are folded into the products (an input row of ones and a
    unit row per user that LeakyReLU keeps at 1)."""
    nb, f = features.shape
    h1 = critics.w1.shape[-1] + 1
    tile = max(1, min(chunk_elems, SCORE_TILE))
    cols = max(1, min(nb, SCORE_COLS, tile // h1))
    rows = max(1, tile // (cols * h1))
    xt = torch.cat([features.t(), features.new_ones(1, nb)])  # (F + 1, B)
    xts = [xt[:, j:j + cols].contiguous() for j in range(0, nb, cols)]
    for i in range(0, users.shape[0], rows):
        u = users[i:i + rows]
        a = u.shape[0]
        w1, w2 = critics.w1[u], critics.w2[u]
        if critics.spectral:
            w1 = critics._sn(w1, critics.sn_u1, u, False)
            w2 = critics._sn(w2, critics.sn_u2, u, False)
        m1 = features.new_zeros(a, h1, f + 1)
        m1[:, :-1, :-1] = w1.transpose(1, 2)
        m1[:, :-1, -1] = critics.b1[u]
        m1[:, -1, -1] = 1.0
        m1 = m1.view(a * h1, f + 1)
        m2 = features.new_zeros(a, h1, h1)
        m2[:, :-1, :-1] = w2.transpose(1, 2)
        m2[:, :-1, -1] = critics.b2[u]
        m2[:, -1, -1] = 1.0
        m3 = torch.cat([critics.w3[u], critics.b3[u][:, None]], 1)[:, None, :]  # (a, 1, H + 1)
        for j, xtj in zip(range(0, nb, cols), xts, strict=True):
            z = torch.mm(m1, xtj).view(a, h1, -1)  # layer 1: one product for all a users
            F.leaky_relu(z, SLOPE, inplace=True)
            z = torch.bmm(m2, z)
            F.leaky_relu(z, SLOPE, inplace=True)
            yield i, j, torch.bmm(m3, z).view(a, -1)


def _distinct_rows(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(distinct rows, inverse index) when at least 5% of the rows repeat (generated pairs
    often do: same place, slot and action), else (features, None). Scoring a row once and
    copying its value to its repeats gives bit-identical per-sample results."""
    uniq, inverse = torch.unique(features, dim=0, return_inverse=True)
    if uniq.shape[0] > 0.95 * features.shape[0]:
        return features, None
    return uniq, inverse


@torch.no_grad()
def critic_rewards(critics: BatchedCritics, features: torch.Tensor, users: torch.Tensor,
                   chunk_elems: int = 1 << 24) -> torch.Tensor:
    """(A, B) rewards R_u = sigmoid(D_u(x)) of the users in `users` on a shared batch."""
    uniq, inverse = _distinct_rows(features)
    out = features.new_empty(users.shape[0], uniq.shape[0])
    for i, j, d in _score_tiles(critics, uniq, users, chunk_elems):
        torch.sigmoid(d, out=out[i:i + d.shape[0], j:j + d.shape[1]])
    return out if inverse is None else out[:, inverse]


@torch.no_grad()
def local_moments(critics: BatchedCritics, features: torch.Tensor, users: torch.Tensor,
                  chunk_elems: int = 1 << 24) -> Moments:
    """Seam for distribution: this rank's sum and sum of squares of its users' rewards.

    Tiled over users and samples so memory stays O(tile) at Telecom scale (`chunk_elems` caps
    the tile). Ranks all-reduce (sum, sumsq, count) and then call one aggregation scheme with
    the merged Moments.
    """
    uniq, inverse = _distinct_rows(features)
    b = uniq.shape[0]
    s, q = torch.zeros(b, dtype=torch.float64), torch.zeros(b, dtype=torch.float64)
    for _, j, d in _score_tiles(critics, uniq, users, chunk_elems):
        r = d.sigmoid_().double()
        s[j:j + r.shape[1]] += r.sum(0)
        q[j:j + r.shape[1]] += (r * r).sum(0)
    if inverse is not None:
        s, q = s[inverse], q[inverse]
    return Moments(s, q, int(users.shape[0]))
