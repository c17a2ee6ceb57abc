from __future__ import annotations

import pytest
import torch

from models.critics import (
    BatchedAdam,
    BatchedCritics,
    SingleCritic,
    critic_losses,
    critic_rewards,
    critic_step,
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
