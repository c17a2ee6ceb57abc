from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from models.critic_step import CriticStep
from models.critic_training import _chunk_losses_and_grads, critic_update
from models.critics import (
    BatchedAdam,
    BatchedCritics,
    CriticLoss,
    Minibatch,
    SingleCritic,
    _distinct_rows,
    critic_losses,
    critic_rewards,
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
        CriticStep(crit, bopt, real, counts, 4, 8, kind, 10.0).own_draws(gen_feats, users, gs)
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
        got = critic_update(mine, opts[1], Minibatch(rb, gb, al), users, CriticLoss(kind, 10.0))
        got_one = critic_update(one, opts[2], Minibatch(rb, gb, al), users, CriticLoss(kind, 10.0),
                                tile=1)
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


def test_parameters_are_views_of_the_flat_layout_and_survive_replacement():
    """The six parameters are views into one (U, P) buffer with biases folded in and constant
    unit/zero entries; replacing them (as sharding does) rebuilds the buffer with their values."""
    crit = BatchedCritics(5, 13, 8, torch.Generator().manual_seed(0))
    flat, lay = crit.flat(), crit.layout
    l1, l2, l3 = lay.blocks(flat)
    assert torch.equal(l1[:, :13, :8], crit.w1) and torch.equal(l1[:, 13, :8], crit.b1)
    assert torch.equal(l2[:, :8], crit.w2) and torch.equal(l2[:, 8], crit.b2)
    assert torch.equal(l3[:, :8], crit.w3) and torch.equal(l3[:, 8], crit.b3)
    assert bool((l1[:, 13, 8] == 1).all()) and bool((l1[:, :13, 8] == 0).all())
    with torch.no_grad():
        crit.w2[1, 2, 3] = 7.0  # a write through the parameter is a write into the buffer
    assert flat[1, lay.o2 + 2 * 8 + 3] == 7.0
    # independent oracle: the same draws as the pre-layout initialisation
    g = torch.Generator().manual_seed(0)
    w1 = (torch.rand((5, 13, 8), generator=g) * 2 - 1) * 13 ** -0.5
    assert torch.equal(crit.w1, w1)
    rows = torch.tensor([4, 1])
    want = {k: v[rows].clone() for k, v in crit.state_dict().items()}
    for name, p in list(crit.named_parameters()):  # what models.train.shard_critics does
        setattr(crit, name, nn.Parameter(p[rows].clone()))
    for name, b in list(crit.named_buffers()):
        setattr(crit, name, b[rows].clone())
    crit.n_users = 2
    new = crit.flat()
    assert new.shape == (2, lay.size) and new.data_ptr() != flat.data_ptr()
    for k, v in crit.state_dict().items():
        assert torch.equal(v, want[k]), k
    assert crit.w1.data_ptr() == lay.params(new)[0].data_ptr()
    assert bool((lay.blocks(new)[0][:, 13, 8] == 1).all())


def test_state_dict_keeps_names_and_shapes():
    """Checkpoints and the critic store read w1..b3 by name with a leading user dimension."""
    crit = BatchedCritics(3, 13, 8, torch.Generator().manual_seed(0))
    sd = crit.state_dict()
    assert {k: tuple(v.shape) for k, v in sd.items()} == {
        "w1": (3, 13, 8), "b1": (3, 8), "w2": (3, 8, 8), "b2": (3, 8), "w3": (3, 8),
        "b3": (3,), "sn_u1": (3, 13), "sn_u2": (3, 8)}
    other = BatchedCritics(3, 13, 8, torch.Generator().manual_seed(1))
    other.load_state_dict({k: v.clone().contiguous() for k, v in sd.items()})
    flat = other.flat()
    for k, v in other.state_dict().items():
        assert torch.equal(v, sd[k]), k
    assert flat.data_ptr() == other.w1.data_ptr()  # load copies into the views


@pytest.mark.parametrize("kind", ["wgan", "bce"])
def test_update_after_sharding_and_resume_equals_the_reference(kind):
    """critic_update on critics whose parameters were replaced (sharding) and whose optimiser
    state was reloaded (resume) ends exactly where the same steps on untouched objects do."""
    real, counts, gen_feats = _data()
    ref = BatchedCritics(4, 13, 16, torch.Generator().manual_seed(1))
    ref_opt = BatchedAdam(list(ref.parameters()), lr=1e-2)
    mine = copy.deepcopy(ref)
    users = torch.arange(4)

    def step(crit, opt, k):
        rb, gb, al = sample_batches(real, counts, gen_feats, users, 8,
                                    torch.Generator().manual_seed(30 + k))
        return critic_update(crit, opt, Minibatch(rb, gb, al), users, CriticLoss(kind, 10.0),
                             tile=1000)

    step(ref, ref_opt, 0)
    step(ref, ref_opt, 1)
    for name, p in list(mine.named_parameters()):
        setattr(mine, name, nn.Parameter(p.detach().clone()))
    opt = BatchedAdam(list(mine.parameters()), lr=1e-2)
    step(mine, opt, 0)
    state = copy.deepcopy(opt.state_dict())
    opt = BatchedAdam(list(mine.parameters()), lr=1e-2)
    opt.load_state_dict(state)
    step(mine, opt, 1)
    for (name, p), q in zip(ref.state_dict().items(), mine.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    for a, b in zip(ref_opt.m + ref_opt.v, opt.m + opt.v, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(ref_opt.t, opt.t)


def test_adam_never_moves_the_constant_entries_of_the_layout():
    real, counts, gen_feats = _data()
    crit = BatchedCritics(4, 13, 16, torch.Generator().manual_seed(1))
    opt = BatchedAdam(list(crit.parameters()), lr=0.1)
    before = crit.flat().clone()
    users = torch.tensor([2, 0, 3])
    for k in range(3):
        CriticStep(crit, opt, real, counts, 4, 8, "wgan", 10.0).own_draws(
            gen_feats, users, torch.Generator().manual_seed(k))
    lay, flat = crit.layout, crit.flat()
    const = torch.ones(lay.size, dtype=torch.bool)
    for view in lay.params(const[None]):
        view.fill_(False)  # parameter entries; what is left are the constant ones
    assert int(const.sum()) == 13 + 1  # the unit column of L1
    assert torch.equal(flat[:, const], before[:, const])
    assert not torch.equal(flat[users], before[users]) and torch.equal(flat[1], before[1])
    fm, fv = opt.flat_moments(crit)
    assert bool((fm[:, const] == 0).all()) and bool((fv[:, const] == 0).all())


def test_adam_must_hold_the_critics_parameters():
    crit = BatchedCritics(2, 13, 8, torch.Generator().manual_seed(0))
    other = BatchedCritics(2, 13, 8, torch.Generator().manual_seed(0))
    real, counts, gen_feats = _data(u=2)
    opt = BatchedAdam(list(other.parameters()))
    with pytest.raises(ValueError, match="must hold the critics' parameters"):
        CriticStep(crit, opt, real, counts, 2, 4, "wgan", 10.0).own_draws(
            gen_feats, torch.arange(2), torch.Generator().manual_seed(0))


def test_sample_batches_draws_each_users_own_rows():
    """Oracle: the advanced-indexing definition with the same random draws."""
    real, counts, gen_feats = _data()
    users = torch.tensor([3, 1, 2])
    rb, gb, al = sample_batches(real, counts, gen_feats, users, 6,
                                torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    ridx = (torch.rand((3, 6), generator=g) * counts[users][:, None]).long()
    gidx = torch.randint(gen_feats.shape[0], (3, 6), generator=g)
    assert torch.equal(rb, real[users[:, None], ridx]) and torch.equal(gb, gen_feats[gidx])
    assert torch.equal(al, torch.rand((3, 6, 1), generator=g))
    assert bool((ridx < counts[users][:, None]).all())


@pytest.mark.parametrize("spectral", [False, True])
def test_scoring_groups_and_partial_tiles_equal_forward(monkeypatch, spectral):
    """Many users in several groups, tiles that do not divide the users or the samples."""
    import models.critics as critics_mod

    monkeypatch.setattr(critics_mod, "SCORE_TILE", 3 * 9 * 7)  # 3 users x 7 columns, H+1 = 9
    monkeypatch.setattr(critics_mod, "SCORE_COLS", 7)
    monkeypatch.setattr(critics_mod, "SCORE_USERS", 7)  # groups of 6 users
    _, _, gen_feats = _data()
    crit = BatchedCritics(23, 13, 8, torch.Generator().manual_seed(2), spectral_norm=spectral)
    for users in (torch.arange(3, 23), torch.tensor([22, 0, 5, 9, 1, 13, 7, 2])):
        with torch.no_grad():
            want = torch.sigmoid(crit(gen_feats, users))
        assert torch.allclose(critic_rewards(crit, gen_feats, users), want, atol=1e-6)
        m = local_moments(crit, gen_feats, users)
        assert torch.allclose(m.sum, want.double().sum(0), atol=1e-6)
        assert torch.allclose(m.sumsq, (want.double() ** 2).sum(0), atol=1e-6)


def test_fused_and_elementwise_adam_steps_agree():
    """The fused kernel (users sharing a step count) and the elementwise form (any counts) are
    the same Adam step, up to float rounding."""
    g = torch.Generator().manual_seed(0)
    p = torch.randn((6, 40), generator=g)
    opt = BatchedAdam([nn.Parameter(p.clone())], lr=0.01)
    state = [[p.clone(), torch.zeros(6, 40), torch.zeros(6, 40)] for _ in range(2)]
    for k in range(1, 5):
        grad = torch.randn((6, 40), generator=g) * 10.0 ** -k  # includes tiny gradients
        c1 = torch.full((6, 1), 1 - 0.5 ** k)
        c2 = torch.full((6, 1), 1 - 0.9 ** k)
        opt.update(*state[0], grad, c1, c2, torch.tensor(float(k)))
        opt.update(*state[1], grad, c1, c2)
    for a, b in zip(state[0], state[1], strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", ["wgan", "bce"])
def test_mixed_participation_equals_a_per_user_loop(kind):
    """Users with different step counts (some skipped a round): the batched update takes the
    elementwise Adam path and still equals per-user torch.optim.Adam."""
    real, counts, gen_feats = _data()
    crit = BatchedCritics(4, 13, 16, torch.Generator().manual_seed(1))
    loop = [SingleCritic(crit, u) for u in range(4)]
    opts = [torch.optim.Adam(c.parameters(), lr=1e-2, betas=(0.5, 0.9), eps=1e-8) for c in loop]
    bopt = BatchedAdam(list(crit.parameters()), lr=1e-2)
    for step, users in enumerate([[0, 2], [0, 1, 2, 3], [1, 3], [0, 1, 3]]):
        users = torch.tensor(users)
        rb, gb, al = sample_batches(real, counts, gen_feats, users, 8,
                                    torch.Generator().manual_seed(40 + step))
        critic_update(crit, bopt, Minibatch(rb, gb, al), users, CriticLoss(kind, 10.0))
        for i, u in enumerate(users.tolist()):
            loss = critic_losses(lambda x, c=loop[u]: c(x), rb[i:i + 1], gb[i:i + 1],
                                 al[i:i + 1], kind, 10.0)
            opts[u].zero_grad()
            loss.sum().backward()
            opts[u].step()
    assert bopt.t.tolist() == [3, 3, 2, 3]
    for u in range(4):
        for name in ("w1", "b1", "w2", "b2", "w3", "b3"):
            assert torch.allclose(getattr(crit, name)[u], getattr(loop[u], name), atol=1e-5), name


def test_distinct_rows_against_torch_unique():
    """Oracle: torch.unique(dim=0). Rows are compared bit for bit: -0.0 and 0.0 stay apart (a
    repeat gets exactly its row's score); below `min_share` repeats nothing is merged."""
    g = torch.Generator().manual_seed(0)
    base = torch.randint(0, 3, (40, 4), generator=g).float()  # many repeats
    uniq, inverse = _distinct_rows(base, 0.0)
    assert torch.equal(uniq[inverse], base)
    assert uniq.shape[0] == torch.unique(base, dim=0).shape[0] < 40
    signed = torch.tensor([[0.0, 1.0], [-0.0, 1.0], [0.0, 1.0]])
    uniq, inverse = _distinct_rows(signed, 0.0)
    assert uniq.shape[0] == 2 and torch.equal(uniq[inverse], signed)
    assert torch.equal(torch.signbit(uniq[inverse]), torch.signbit(signed))
    distinct = torch.randn((30, 3), generator=g)
    assert _distinct_rows(distinct, 0.0)[1] is None
    few = torch.cat([distinct, distinct[:1]])  # 1 repeat in 31 rows: 3.2 %
    assert _distinct_rows(few, 0.05)[1] is None and _distinct_rows(few, 0.0)[1] is not None
