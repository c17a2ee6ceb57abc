from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from models.critics import (
    BatchedAdam,
    BatchedCritics,
    SingleCritic,
    _chunk_losses_and_grads,
    critic_losses,
    critic_rewards,
    critic_step,
    critic_update,
    local_moments,
    sample_batches,
)


def _data(u=4, n=30, f=13, seed=0):
    g = torch.Generator().manual_seed(seed)
    real = torch.randn((u, n, f), generator=g)
    counts = torch.tensor([n, n - 5, 7, n][:u])
    gen_feats = torch.randn((50, f), generator=g) + 0.5
    return real, counts, gen_feats


@pytest.mark.parametrize("kind", ["wgan", "bce"])
def test_batched_step_equals_a_per_user_loop(kind):
    """Oracle: independent nn.Modules with torch.optim.Adam, one per user, same batches."""
    real, counts, gen_feats = _data()
    g = torch.Generator().manual_seed(1)
    crit = BatchedCritics(4, 13, 16, g)
    loop = [SingleCritic(crit, u) for u in range(4)]
    opts = [torch.optim.Adam(c.parameters(), lr=1e-2, betas=(0.5, 0.9), eps=1e-8) for c in loop]
    bopt = BatchedAdam(list(crit.parameters()), lr=1e-2)
    users = torch.tensor([0, 2, 3])  # user 1 does not participate
    w1_user1 = crit.w1[1].detach().clone()
    for step in range(3):
        gs = torch.Generator().manual_seed(10 + step)
        real_b, gen_b, alpha = sample_batches(real, counts, gen_feats, users, 8,
                                              torch.Generator().manual_seed(10 + step))
        critic_step(crit, bopt, real, counts, gen_feats, users, 8, kind, 10.0, gs)
        for i, u in enumerate(users.tolist()):
            def single(x, c=loop[u]):
                return c(x)
            loss = critic_losses(single, real_b[i:i + 1], gen_b[i:i + 1], alpha[i:i + 1], kind,
                                 10.0)
            opts[u].zero_grad()
            loss.sum().backward()
            opts[u].step()
    for u in users.tolist():
        for name in ("w1", "b1", "w2", "b2", "w3", "b3"):
            assert torch.allclose(getattr(crit, name)[u], getattr(loop[u], name), atol=1e-5), name
    assert torch.equal(crit.w1[1], w1_user1)  # non-participant untouched (no Adam momentum)
    assert bopt.t.tolist() == [3, 0, 3, 3]


def test_gradient_penalty_is_in_feature_space():
    """With lambda_gp only, the loss equals (|dD/dx| - 1)^2 computed by an independent autograd
    call on a single user's critic."""
    real, counts, gen_feats = _data(u=1)
    crit = BatchedCritics(1, 13, 8, torch.Generator().manual_seed(0))
    rb, gb, al = sample_batches(real, counts, gen_feats, torch.tensor([0]), 5,
                                torch.Generator().manual_seed(0))
    full = critic_losses(crit, rb, gb, al, "wgan", 1.0)
    base = critic_losses(crit, rb, gb, al, "wgan", 0.0)
    single = SingleCritic(crit, 0)
    x = (al[0] * rb[0] + (1 - al[0]) * gb[0]).requires_grad_(True)
    (gr,) = torch.autograd.grad(single(x).sum(), x)
    assert torch.allclose(full - base, ((gr.norm(dim=1) - 1) ** 2).mean(), atol=1e-5)


def test_moments_and_rewards_agree_and_chunk():
    _, _, gen_feats = _data()
    crit = BatchedCritics(4, 13, 8, torch.Generator().manual_seed(0))
    users = torch.tensor([0, 1, 3])
    r = critic_rewards(crit, gen_feats, users, chunk_elems=1)  # one user per chunk
    assert r.shape == (3, 50) and bool(((r > 0) & (r < 1)).all())
    m = local_moments(crit, gen_feats, users, chunk_elems=1)
    assert m.count == 3
    assert torch.allclose(m.sum, r.double().sum(0), atol=1e-6)
    assert torch.allclose(m.sumsq, (r.double() ** 2).sum(0), atol=1e-6)
    # sharded: two ranks' moments merged = one rank's
    a = local_moments(crit, gen_feats, torch.tensor([0]))
    b = local_moments(crit, gen_feats, torch.tensor([1, 3]))
    merged = a.merge(b)
    assert torch.allclose(merged.sum, m.sum) and merged.count == 3


def test_spectral_norm_bounds_the_weights():
    crit = BatchedCritics(3, 13, 16, torch.Generator().manual_seed(0), spectral_norm=True)
    with torch.no_grad():
        crit.w2.mul_(torch.tensor([1.0, 10.0, 100.0])[:, None, None])
    users = torch.arange(3)
    for _ in range(30):
        w = crit._sn(crit.w2[users], crit.sn_u2, users, update=True)
    top = torch.linalg.matrix_norm(w.detach(), ord=2)
    assert torch.allclose(top, torch.ones(3), atol=1e-3)


def _autograd_step(crit, opt, rb, gb, al, users, kind, lam):
    """The reference step: `critic_losses` through `forward`, autograd, BatchedAdam.step."""
    losses = critic_losses(crit, rb, gb, al, kind, lam, users=users, update_sn=True)
    crit.zero_grad(set_to_none=True)
    losses.sum().backward()
    opt.step(users)
    return losses.detach()


@pytest.mark.parametrize("spectral", [False, True])
@pytest.mark.parametrize("kind", ["wgan", "bce"])
def test_closed_form_gradients_equal_autograd(kind, spectral):
    """`critic_update`'s hand-written loss gradients (gradient penalty included, and through the
    spectral normalisation) equal autograd's double backward, parameter by parameter."""
    real, counts, gen_feats = _data()
    users = torch.tensor([3, 0, 2])  # unordered subset: the gather path
    rb, gb, al = sample_batches(real, counts, gen_feats, users, 8,
                                torch.Generator().manual_seed(3))
    ref = BatchedCritics(4, 13, 16, torch.Generator().manual_seed(1), spectral_norm=spectral)
    mine = copy.deepcopy(ref)
    losses = critic_losses(ref, rb, gb, al, kind, 10.0, users=users, update_sn=True)
    losses.sum().backward()
    x = torch.stack([rb, gb, al * rb + (1 - al) * gb] if kind == "wgan" else [rb, gb], 1)
    with torch.no_grad():
        got, grads = _chunk_losses_and_grads(mine, x, users, kind == "wgan", 10.0)
    assert torch.allclose(got, losses.detach(), rtol=1e-5, atol=1e-6)
    for (name, p), g in zip(ref.named_parameters(), grads, strict=True):
        assert torch.allclose(g, p.grad[users], rtol=1e-4, atol=1e-6), name
    for name, b in ref.named_buffers():  # same power iterations (one per evaluation)
        assert torch.allclose(getattr(mine, name), b, atol=1e-6), name


@pytest.mark.parametrize("spectral", [False, True])
@pytest.mark.parametrize("kind", ["wgan", "bce"])
@pytest.mark.parametrize("users", [[0, 1, 2, 3], [1, 2], [3, 0, 2]])
def test_closed_form_step_equals_the_autograd_step(kind, spectral, users):
    """Three optimisation steps: `critic_update` (chunked over users, Adam applied per chunk,
    in place for consecutive users) ends where the autograd reference does. Tolerance: the
    gradients agree to float round-off (test above), but Adam divides by sqrt(v), so on a
    coordinate whose gradient is itself near round-off (a bias with exactly cancelling WGAN
    terms) a 1e-8 difference can move the weight by a fraction of lr; atol = lr / 10 still
    catches any wrong gradient (that errs by ~lr per step)."""
    real, counts, gen_feats = _data()
    users = torch.tensor(users)
    ref = BatchedCritics(4, 13, 16, torch.Generator().manual_seed(1), spectral_norm=spectral)
    mine, one = copy.deepcopy(ref), copy.deepcopy(ref)
    opts = [BatchedAdam(list(c.parameters()), lr=1e-2) for c in (ref, mine, one)]
    for step in range(3):
        rb, gb, al = sample_batches(real, counts, gen_feats, users, 8,
                                    torch.Generator().manual_seed(20 + step))
        want = _autograd_step(ref, opts[0], rb, gb, al, users, kind, 10.0)
        got = critic_update(mine, opts[1], rb, gb, al, users, kind, 10.0)
        got_one = critic_update(one, opts[2], rb, gb, al, users, kind, 10.0, tile=1)
        assert torch.allclose(got, want, atol=1e-3) and torch.allclose(got_one, want, atol=1e-3)
    for c, o in ((mine, opts[1]), (one, opts[2])):
        for (name, p), q in zip(ref.state_dict().items(), c.state_dict().values(), strict=True):
            assert torch.allclose(p, q, atol=1e-3), name
        assert torch.equal(o.t, opts[0].t)
        for a, b in zip(o.m + o.v, opts[0].m + opts[0].v, strict=True):
            assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("spectral", [False, True])
def test_tiled_scoring_equals_forward(spectral):
    """Scoring with folded biases, user x sample tiles and repeated rows scored once equals
    sigmoid(forward) on every row, for any tile size."""
    _, _, gen_feats = _data()
    feats = torch.cat([gen_feats, gen_feats[:20], gen_feats[5:6]])  # 21 repeated rows
    crit = BatchedCritics(4, 13, 8, torch.Generator().manual_seed(0), spectral_norm=spectral)
    users = torch.tensor([3, 1, 2])
    with torch.no_grad():
        want = torch.sigmoid(crit(feats, users))
    for chunk in (1, 40, 1 << 24):
        r = critic_rewards(crit, feats, users, chunk_elems=chunk)
        assert torch.allclose(r, want, atol=1e-6)
        assert torch.equal(r[:, 50:70], r[:, :20])  # a repeat gets its row's value exactly
        m = local_moments(crit, feats, users, chunk_elems=chunk)
        assert torch.allclose(m.sum, want.double().sum(0), atol=1e-6)
        assert torch.allclose(m.sumsq, (want.double() ** 2).sum(0), atol=1e-6)


def test_adam_in_place_rows_equal_the_gather_path():
    params = [nn.Parameter(torch.randn(5, 3, 2)), nn.Parameter(torch.randn(5))]
    twin = [nn.Parameter(p.detach().clone()) for p in params]
    a, b = BatchedAdam(params, lr=0.1), BatchedAdam(twin, lr=0.1)
    users = torch.tensor([1, 2, 3])
    for k in range(3):
        grads = [torch.randn((3,) + p.shape[1:], generator=torch.Generator().manual_seed(k))
                 for p in params]
        a.apply(users, grads, *a.tick(slice(1, 4)), rows=slice(1, 4))
        b.apply(users, grads, *b.tick(users))
    for p, q in zip(params + a.m + a.v, twin + b.m + b.v, strict=True):
        assert torch.equal(p, q)
    assert torch.equal(a.t, b.t) and a.t.tolist() == [0, 3, 3, 3, 0]
