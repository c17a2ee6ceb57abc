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
- storage (`Layout`): the six parameters are views into one (U, P) buffer, a user per row, biases
  folded into the weight blocks ([x, 1] @ [[w1, 0], [b1, 1]] = [x w1 + b1, 1]; the unit column
  survives LeakyReLU and carries b2 into layer 2). A layer with its bias is one product, a chunk
  of users is a slice of rows (no gather for consecutive users), and Adam updates a chunk with
  one set of elementwise operations on its rows (`BatchedAdam.flat_moments`).
- scoring (`local_moments`, `critic_rewards`): the generated pairs are shared by all users, so
  layer 1 of a tile of users is ONE matrix product (users*(H+1), F+1) @ (F+1, n); layer 2 is a
  per-user product on the transposed L2 block. Tiles of users x samples stay in the L2 cache and
  write into reused buffers, activations are updated in place; float32 throughout and float64
  only for the per-sample sums. Repeated generated rows are scored once (bit-identical values).
- training (`models.critic_training.critic_update`): the loss and its parameter gradients in
  closed form instead of double backward (that module's docstring says how).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SLOPE = 0.2
GAP_STREAM = 0x6A9  # the stream key of `real_pair_sample` (apart from every training stream)
PARAMS = ("w1", "b1", "w2", "b2", "w3", "b3")


def _uniform(gen: torch.Generator, shape: tuple[int, ...], bound: float) -> torch.Tensor:
    return (torch.rand(shape, generator=gen) * 2 - 1) * bound


def _normalize(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


@dataclass(frozen=True)
class Layout:
    """Where one user's parameters sit in a row of the flat (U, P) buffer, biases folded in:
    L1 (F+1, H+1) = [[w1, 0], [b1, 1]] | L2 (H+1, H) = [[w2], [b2]] | L3 (H+1) = [w3, b3].
    So [x, 1] @ L1 = [x w1 + b1, 1] (the unit column survives LeakyReLU) and [a1, 1] @ L2 =
    a1 w2 + b2: a layer with its bias is one product, and a whole user is one contiguous row
    (one Adam update per chunk of users). The constant entries have zero gradient, so Adam
    never moves them."""

    f: int
    h: int

    @property
    def o2(self) -> int:
        return (self.f + 1) * (self.h + 1)

    @property
    def o3(self) -> int:
        return self.o2 + (self.h + 1) * self.h

    @property
    def size(self) -> int:
        return self.o3 + self.h + 1

    def new(self, n: int, unit: bool = True) -> torch.Tensor:
        """(n, P) zeros, with the unit entry of L1 set when `unit` (parameters, not moments)."""
        flat = torch.zeros(n, self.size)
        if unit:
            flat[:, self.o2 - 1] = 1.0
        return flat

    def blocks(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Views (n, F+1, H+1), (n, H+1, H), (n, H+1) of rows `flat` (n, P)."""
        n, f, h = flat.shape[0], self.f, self.h
        return (flat[:, :self.o2].view(n, f + 1, h + 1), flat[:, self.o2:self.o3].view(n, h + 1, h),
                flat[:, self.o3:])

    def params(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Views w1 (n, F, H), b1 (n, H), w2 (n, H, H), b2 (n, H), w3 (n, H), b3 (n,)."""
        l1, l2, l3 = self.blocks(flat)
        f, h = self.f, self.h
        return [l1[:, :f, :h], l1[:, f, :h], l2[:, :h], l2[:, h], l3[:, :h], l3[:, h]]


# torch.optim.Adam(fused=True)'s kernel (one pass over p, g, m, v); absent in older builds
_FUSED_ADAM = getattr(torch, "_fused_adam_", None)


def _is_view(t: torch.Tensor, view: torch.Tensor) -> bool:
    return (t.data_ptr() == view.data_ptr() and t.shape == view.shape
            and t.stride() == view.stride())


class BatchedCritics(nn.Module):
    """w1 (U, F, H), b1 (U, H), w2 (U, H, H), b2 (U, H), w3 (U, H), b3 (U,): parameters that
    are views into one flat (U, P) buffer laid out by `Layout` (see `flat`)."""

    def __init__(self, n_users: int, in_dim: int, hidden: int, gen: torch.Generator,
                 spectral_norm: bool = False):
        super().__init__()
        u, f, h = n_users, in_dim, hidden
        self.n_users, self.spectral = n_users, spectral_norm
        self.layout = Layout(f, h)
        values = [_uniform(gen, (u, f, h), f ** -0.5), _uniform(gen, (u, h), f ** -0.5),
                  _uniform(gen, (u, h, h), h ** -0.5), _uniform(gen, (u, h), h ** -0.5),
                  _uniform(gen, (u, h), h ** -0.5), _uniform(gen, (u,), h ** -0.5)]
        self._flat = self.layout.new(u)
        for name, view, value in zip(PARAMS, self.layout.params(self._flat), values, strict=True):
            view.copy_(value)
            setattr(self, name, nn.Parameter(view))
        self.register_buffer("sn_u1", _normalize(torch.randn((u, f), generator=gen)))
        self.register_buffer("sn_u2", _normalize(torch.randn((u, h), generator=gen)))

    def flat(self) -> torch.Tensor:
        """The (U, P) buffer whose views the parameters are. Code that replaces the parameters
        (sharding, load into fresh tensors, deepcopy, .to()) breaks the views; they are then
        rebuilt here, values kept, and the same Parameter objects point into the new buffer."""
        params = [getattr(self, name) for name in PARAMS]
        flat = self._flat
        if flat.shape[0] == params[0].shape[0] and flat.dtype == params[0].dtype and all(
                _is_view(p, v) for p, v in zip(params, self.layout.params(flat), strict=True)):
            return flat
        flat = self.layout.new(params[0].shape[0]).to(params[0])
        with torch.no_grad():
            for p, view in zip(params, self.layout.params(flat), strict=True):
                view.copy_(p)
                p.data = view
        self._flat = flat
        return flat

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
            users = torch.arange(self.n_users, device=self.w1.device)
        w1, w2 = self.w1[users], self.w2[users]
        if self.spectral:
            w1 = self._sn(w1, self.sn_u1, users, update_sn)
            w2 = self._sn(w2, self.sn_u2, users, update_sn)
        h = torch.matmul(x, w1) + self.b1[users][:, None, :]  # shared x broadcasts over A
        h = F.leaky_relu(h, SLOPE)
        h = F.leaky_relu(torch.baddbmm(self.b2[users][:, None, :], h, w2), SLOPE)
        return torch.einsum("anh,ah->an", h, self.w3[users]) + self.b3[users][:, None]


@dataclass(frozen=True)
class CriticLoss:
    """A critic step's loss: "wgan" (Wasserstein, with a gradient penalty of weight lambda_gp)
    or "bce" (lambda_gp unused)."""

    kind: str
    lambda_gp: float


class Minibatch(NamedTuple):
    """One step's minibatches of A critics: real (A, b, F) rows, each from its user's own pairs,
    generated (A, b, F) rows from the shared public batch, interpolation weights alpha (A, b, 1)
    (the gradient penalty's points)."""

    real: torch.Tensor
    generated: torch.Tensor
    alpha: torch.Tensor


def sample_batches(real: torch.Tensor, counts: torch.Tensor, generated: torch.Tensor,
                   users: torch.Tensor, batch: int, gen: torch.Generator) -> Minibatch:
    """Per-user minibatches: real (A, b, F) from each user's own pairs, generated (A, b, F) from
    the shared public batch, and interpolation weights (A, b, 1)."""
    a = users.shape[0]
    n_max, f = real.shape[1], real.shape[2]
    ridx = (torch.rand((a, batch), generator=gen) * counts[users][:, None]).long()
    ridx += (users * n_max)[:, None]  # row of real.view(-1, F)
    real_b = real.reshape(-1, f).index_select(0, ridx.view(-1)).view(a, batch, f)
    gidx = torch.randint(generated.shape[0], (a, batch), generator=gen)
    gen_b = generated.index_select(0, gidx.view(-1)).view(a, batch, f)
    alpha = torch.rand((a, batch, 1), generator=gen)
    return Minibatch(real_b, gen_b, alpha)


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
    if not torch.equal(users, torch.arange(first, first + n, device=users.device)):
        return None
    return slice(first, first + n)


@dataclass
class BatchedAdam:
    """Adam over stacked per-user parameters; a step updates only the given users.

    `critic_update` keeps the moments m, v in the critics' flat layout (`flat_moments`): the
    lists `m`, `v` are then views into two (U, P) buffers, and a chunk of users is updated by
    one set of elementwise operations on its rows, or one fused kernel call when the users share
    a step count. Same arithmetic either way (`update`)."""

    params: list[nn.Parameter]
    lr: float = 1e-3
    betas: tuple[float, float] = (0.5, 0.9)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = torch.zeros(self.params[0].shape[0], dtype=torch.long,
                             device=self.params[0].device)
        self._flat: tuple[torch.Tensor, torch.Tensor] | None = None

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
    def update(self, p: torch.Tensor, m: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
               c1: torch.Tensor, c2: torch.Tensor, step: torch.Tensor | None = None) -> None:
        """One Adam step in place on rows p, m, v with gradient g and bias corrections c1, c2
        (broadcast over each user's entries), in torch.optim.Adam's arithmetic (the per-user
        loop's optimiser). `step`: the rows' common step count (a float scalar tensor) when
        they share one; then torch's fused CPU kernel does the same step in one pass."""
        b1, b2 = self.betas
        if step is not None and _FUSED_ADAM is not None:
            _FUSED_ADAM([p], [g], [m], [v], [], [step], lr=self.lr, beta1=b1, beta2=b2,
                        weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)
            return
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        den = v.sqrt().div_(c2.sqrt()).add_(self.eps)
        p.sub_(torch.div(m, den).mul_(self.lr / c1))

    @torch.no_grad()
    def apply(self, users: torch.Tensor, grads: list[torch.Tensor], c1: torch.Tensor,
              c2: torch.Tensor, rows: slice | None = None) -> None:
        """Adam update of the rows `users` with `grads` (one (A, ...) tensor per parameter) and
        their bias corrections from `tick`; `rows`: the same users as a slice, updated in place
        through views (no gather/scatter)."""
        for p, m, v, g in zip(self.params, self.m, self.v, grads, strict=True):
            shape = (-1,) + (1,) * (p.dim() - 1)
            if rows is None:
                pu, mu, vu = p[users], m[users], v[users]
                self.update(pu, mu, vu, g, c1.view(shape), c2.view(shape))
                p[users], m[users], v[users] = pu, mu, vu
            else:
                self.update(p[rows], m[rows], v[rows], g, c1.view(shape), c2.view(shape))

    @torch.no_grad()
    def flat_moments(self, critics: BatchedCritics) -> tuple[torch.Tensor, torch.Tensor]:
        """m and v as (U, P) buffers in the critics' layout, with the lists `m`, `v` views of
        them (moved there, values kept, on first use and after `load_state_dict`)."""
        mine = [getattr(critics, name) for name in PARAMS]
        if len(self.params) != len(mine) or any(
                p is not q for p, q in zip(self.params, mine, strict=False)):
            raise ValueError("BatchedAdam must hold the critics' parameters (w1, b1, w2, b2, "
                             "w3, b3, in that order): build it from list(critics.parameters())")
        lay, n = critics.layout, mine[0].shape[0]
        if self._flat is not None:
            fm, fv = self._flat
            if fm.shape[0] == n and all(
                    _is_view(a, b) for a, b in zip(self.m + self.v,
                                                   lay.params(fm) + lay.params(fv), strict=True)):
                return fm, fv
        fm, fv = (lay.new(n, unit=False).to(mine[0]) for _ in range(2))
        for old, view in zip(self.m + self.v, lay.params(fm) + lay.params(fv), strict=True):
            view.copy_(old)
        self.m, self.v = lay.params(fm), lay.params(fv)
        self._flat = (fm, fv)
        return fm, fv

    def state_dict(self) -> dict:
        return {"m": self.m, "v": self.v, "t": self.t}

    def load_state_dict(self, sd: dict) -> None:
        dev = self.params[0].device  # a checkpoint holds CPU tensors
        self.m = [x.clone().to(dev) for x in sd["m"]]
        self.v = [x.clone().to(dev) for x in sd["v"]]
        self.t = sd["t"].clone().to(dev)


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


SCORE_TILE = 1 << 17  # hidden activations (elements) per tile of users x samples (L2-sized)
SCORE_COLS = 256  # generated samples per tile
SCORE_USERS = 64  # users whose weights are laid out and whose rewards are summed together


def _score_chunks(critics: BatchedCritics, features: torch.Tensor, users: torch.Tensor,
                  chunk_elems: int):
    """Yield (i, d): the logits D_u(x) (a, B) of users[i:i + a] on every row of `features`,
    computed in tiles of users x samples. Layer 1 of a tile is ONE product for all its users,
    (a*(H+1), F+1) @ (F+1, n) with the features and a row of ones (biases and the unit row
    come from the layout); layer 2 is a per-user product with the unit row carrying b2."""
    nb, f = features.shape
    h = critics.layout.h
    h1 = h + 1
    tile = max(1, min(chunk_elems, SCORE_TILE))
    cols = max(1, min(nb, SCORE_COLS, tile // h1))
    rows = max(1, tile // (cols * h1))  # users per tile
    group = max(1, min(SCORE_USERS, chunk_elems // nb) // rows) * rows  # users per yield
    xt = torch.cat([features.t(), features.new_ones(1, nb)])  # (F + 1, B)
    xts = [xt[:, j:j + cols].contiguous() for j in range(0, nb, cols)]
    bufs: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    flat = critics.flat()
    span = _as_slice(users)
    for i in range(0, users.shape[0], group):
        u = users[i:i + group]
        a = u.shape[0]
        l1, l2, l3 = critics.layout.blocks(flat[u if span is None else
                                                 slice(span.start + i, span.start + i + a)])
        if critics.spectral:
            l1, l2 = l1.clone(), l2.clone()
            l1[:, :f, :h] = critics._sn(l1[:, :f, :h], critics.sn_u1, u, False)
            l2[:, :h] = critics._sn(l2[:, :h], critics.sn_u2, u, False)
        m1 = l1.transpose(1, 2).reshape(a * h1, f + 1)  # every user's L1^T, stacked
        m2, m3, b3 = l2.transpose(1, 2), l3[:, None, :h], l3[:, h:]  # (a, H, H+1), (a, 1, H)
        parts = [(xtj, features.new_empty(a, 1, xtj.shape[1])) for xtj in xts]  # per column tile
        for k in range(0, a, rows):
            r = min(rows, a - k)
            m1k, m2k, m3k = m1[k * h1:(k + r) * h1], m2[k:k + r], m3[k:k + r]
            for xtj, dj in parts:
                n = xtj.shape[1]
                if (r, n) not in bufs:
                    bufs[r, n] = (xt.new_empty(r * h1, n), xt.new_empty(r, h, n))
                z1, z2 = bufs[r, n]
                F.leaky_relu(torch.mm(m1k, xtj, out=z1), SLOPE, inplace=True)
                F.leaky_relu(torch.bmm(m2k, z1.view(r, h1, n), out=z2), SLOPE, inplace=True)
                torch.bmm(m3k, z2, out=dj[k:k + r])
        d = torch.cat([dj for _, dj in parts], 2).view(a, nb).add_(b3)
        yield i, d


def _distinct_rows(features: torch.Tensor, min_share: float
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(distinct rows, inverse index) when at least `min_share` of the rows repeat (generated
    pairs often do: same place, slot and action), else (features, None). Rows are compared bit
    for bit (a stable sort per column, last column first, then neighbours compared), so
    scoring a row once and copying its value to its repeats gives bit-identical results."""
    b, f = features.shape
    keys = features.contiguous().view(torch.int32)
    order = torch.arange(b, device=features.device)
    for k in range(f - 1, -1, -1):  # least significant column first: lexicographic order
        order = order[torch.sort(keys[order, k], stable=True).indices]
    ranked = keys[order]
    first = torch.ones(b, dtype=torch.bool, device=features.device)
    first[1:] = (ranked[1:] != ranked[:-1]).any(1)
    n_uniq = int(first.sum())
    if b - n_uniq < min_share * b or n_uniq == b:
        return features, None
    inverse = torch.empty(b, dtype=torch.long, device=features.device)
    inverse[order] = first.cumsum(0) - 1
    return features[order[first]], inverse


@torch.no_grad()
def critic_rewards(critics: BatchedCritics, features: torch.Tensor, users: torch.Tensor,
                   chunk_elems: int = 1 << 24) -> torch.Tensor:
    """(A, B) rewards R_u = sigmoid(D_u(x)) of the users in `users` on a shared batch."""
    uniq, inverse = _distinct_rows(features, 0.05)  # below 5%, the (A, B) copy costs more
    out = features.new_empty(users.shape[0], uniq.shape[0])
    for i, d in _score_chunks(critics, uniq, users, chunk_elems):
        torch.sigmoid(d, out=out[i:i + d.shape[0]])
    return out if inverse is None else out[:, inverse]


@torch.no_grad()
def local_moments(critics: BatchedCritics, features: torch.Tensor, users: torch.Tensor,
                  chunk_elems: int = 1 << 24) -> Moments:
    """Seam for distribution: this rank's sum and sum of squares of its users' rewards.

    Tiled over users and samples so memory stays O(tile) at Telecom scale (`chunk_elems` caps
    the tile). Ranks all-reduce (sum, sumsq, count) and then call one aggregation scheme with
    the merged Moments.
    """
    uniq, inverse = _distinct_rows(features, 0.0)
    b = uniq.shape[0]
    s, q = (torch.zeros(b, dtype=torch.float64, device=uniq.device) for _ in range(2))
    for _, d in _score_chunks(critics, uniq, users, chunk_elems):
        r = d.sigmoid_().double()
        s += r.sum(0)
        q += r.square_().sum(0)
    if inverse is not None:
        s, q = s[inverse], q[inverse]
    return Moments(s, q, int(users.shape[0]))


def real_pair_sample(real: torch.Tensor, counts: torch.Tensor, rows: torch.Tensor, seed: int,
                     pairs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed sample of at most `pairs` of each user's real pairs, for `real_reward_means`:
    (real_sub (U, m, F), counts_sub (U,)), m = min(pairs, max count); `pairs` = 0 keeps all.

    Why: the trusted `critic_gap` diagnostic scored every real pair of every participant each
    round, which at scale cost several times the critics' training steps. The mean
    of a fixed uniform sample of m pairs is an unbiased estimate of the user's in-sample mean
    reward, with standard error at most 0.5 / sqrt(m) per user (rewards lie in [0, 1]), far
    less over the users' mean.
    A user's sample is drawn without replacement from its own stream keyed by (seed, global
    row), so it does not depend on the sharding, and it consumes no draw of the training
    streams: the trained model is the same whatever `pairs` is. Users with at most `pairs`
    pairs keep all of them, in order."""
    n_max = real.shape[1]
    if pairs == 0 or n_max <= pairs:
        return real, counts
    idx = torch.zeros((real.shape[0], pairs), dtype=torch.long)
    for i, (row, count) in enumerate(zip(rows.tolist(), counts.tolist(), strict=True)):
        if count <= pairs:
            idx[i, :count] = torch.arange(count)
        else:
            rng = np.random.default_rng([seed, GAP_STREAM, row])
            idx[i] = torch.from_numpy(np.sort(rng.choice(count, pairs, replace=False)))
    sub = real[torch.arange(real.shape[0], device=real.device)[:, None], idx.to(real.device)]
    return sub, counts.clamp(max=pairs)


@torch.no_grad()
def real_reward_means(critics: BatchedCritics, real: torch.Tensor, counts: torch.Tensor,
                      users: torch.Tensor, chunk_elems: int = 1 << 24) -> torch.Tensor:
    """(A,) float64: each user's mean reward R_u = sigmoid(D_u) over ALL its own real pairs
    (rows `real[u, :counts[u]]`; the padding is masked). Exact critic outputs of private data:
    a trusted-zone diagnostic (`train._Run.one_round`'s `critic_gap`), never released. In-sample:
    these are the pairs the critic trains on, so a gap can include memorisation. Chunked over
    users so at most about `chunk_elems` hidden activations exist at once."""
    a, n_max = users.shape[0], real.shape[1]
    out = torch.zeros(a, dtype=torch.float64, device=real.device)
    if a == 0:
        return out
    step = max(1, chunk_elems // max(1, n_max * critics.layout.h))
    cnt = counts.to(real.device)
    cols = torch.arange(n_max, device=real.device)
    for i in range(0, a, step):
        u = users[i:i + step].to(real.device)
        r = torch.sigmoid(critics(real[u], u)).double()  # (a, n_max)
        mask = cols[None, :] < cnt[u][:, None]
        out[i:i + u.shape[0]] = (r * mask).sum(1) / cnt[u].clamp_min(1).double()
    return out
