"""The critics' training step in closed form (`critic_update`), the fast equivalent of
`models.critics.critic_losses` + autograd + `BatchedAdam.step`.

The WGAN-GP loss and its parameter gradients in closed form instead of double backward. For the
MLP, dD/dx = W1 (s1 * (W2 (s2 * w3))) with s the LeakyReLU
slopes (1 or SLOPE, constant almost everywhere, as autograd treats them, and applied with
autograd's own LeakyReLU backward kernel); the same vectors v2 = s2*w3 and v1 = s1*(W2 v2) are
the backward pass of D, so the three row groups (real, generated, interpolated) share one
product per weight matrix. Chunked over users into reused buffers, and each chunk's Adam update
is applied right away (in place when the users are consecutive), which is exact because a
user's loss reads only its own rows. The real and generated minibatches differ per user, so
there is no shared product here. Where the time goes and what bounds it: bench/bench_train.py.

Apart from models/critics.py (the critics, their optimiser, their scoring): the forward and
backward passes here are written out step by step and share buffers that only training needs.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

from models.critics import (
    SLOPE,
    BatchedAdam,
    BatchedCritics,
    CriticLoss,
    Layout,
    Minibatch,
    _as_slice,
)

STEP_TILE = 1 << 20  # hidden activations (elements) per user chunk of a training step
_lrelu_backward_out = torch.ops.aten.leaky_relu_backward.grad_input  # autograd's own kernel


def _softplus_grad(x: torch.Tensor, g: float) -> torch.Tensor:
    """g * softplus'(x), written as autograd's softplus backward (beta 1, threshold 20)."""
    z = x.exp()
    return torch.where(x > 20, g, g * z / (z + 1))


class _Params:
    """Views of the parameter blocks of rows p (n, P) of the flat buffer (sliced per chunk)."""

    def __init__(self, layout: Layout, p: torch.Tensor):
        f, h = layout.f, layout.h
        self.p = p
        self.l1, self.l2, l3 = layout.blocks(p)  # (n, F+1, H+1), (n, H+1, H), (n, H+1)
        self.w1, self.w2 = self.l1[:, :f, :h], self.l2[:, :h]
        self.w3, self.w3row, self.b3 = l3[:, :h], l3[:, None, :h], l3[:, h:]

    def rows(self, i: int, j: int) -> _Params:
        out = object.__new__(_Params)
        for k, t in vars(self).items():
            setattr(out, k, t[i:j])
        return out


class _Workspace:
    """Buffers of one `critic_update` call, reused by each chunk of (at most c) users: input
    rows x with their unit column, activations a1 (unit column included) and a2, the backward
    vectors v1, v2 (row groups: real, generated, interpolated) and the flat gradient rows g
    (constant entries of the layout stay 0). `chunk(c)` gives (cached) views for c users."""

    def __init__(self, c: int, ng: int, b: int, layout: Layout, like: torch.Tensor):
        f, h = layout.f, layout.h
        self.layout, self.ng, self.b = layout, ng, b
        self.x = like.new_ones(c, ng, b, f + 1)
        self.a1 = like.new_empty(c, ng, b, h + 1)
        self.a2, self.v1, self.v2 = (like.new_empty(c, ng, b, h) for _ in range(3))
        self.g = layout.new(c, unit=False).to(like)
        # the penalty's dD/dx (also the generated rows' (1 - alpha) x), its backward, products
        self.grad = like.new_empty(c, b, f)
        self.e1, self.t = like.new_empty(c, b, h), like.new_empty(c, b, h)
        self.gw1, self.gw2 = like.new_empty(c, f, h), like.new_empty(c, h, h)
        # WGAN: dLoss/dD = -1/b on real rows, 1/b on generated ones; 1 on the interpolated
        # rows, where v1, v2 are the chain of dD/dx
        self.scale = like.new_tensor([-1.0 / b, 1.0 / b, 1.0])[:ng, None, None]
        self.dd = self.scale[:2, 0].expand(c, 2, b).reshape(c, 1, 2 * b)
        self._views: dict[int, SimpleNamespace] = {}

    def chunk(self, c: int) -> SimpleNamespace:
        if c not in self._views:
            f, h, ng, b = self.layout.f, self.layout.h, self.ng, self.b
            x, a1, a2, v1, v2 = (t[:c] for t in (self.x, self.a1, self.a2, self.v1, self.v2))
            a2_rg = a2[:, :2].view(c, 2 * b, h)
            v = SimpleNamespace(
                c=c, x=x, x3=x.view(c, ng * b, f + 1), xr=x[:, 0, :, :f], xg=x[:, 1, :, :f],
                xi=x[:, -1, :, :f], xT=x.view(c, ng * b, f + 1)[..., :f].transpose(1, 2),
                a1=a1, a1_3=a1.view(c, ng * b, h + 1), a1h=a1[..., :h], a1i=a1[:, -1, :, :h],
                a1T=a1.view(c, ng * b, h + 1)[..., :h].transpose(1, 2),
                a2=a2, a2_3=a2.view(c, ng * b, h), a2_rg=a2_rg, a2_rgT=a2_rg.transpose(1, 2),
                a2i=a2[:, -1], v1=v1, v1_3=v1.view(c, ng * b, h), v1i=v1[:, -1],
                v1_rg=v1[:, :2], v2=v2, v2_3=v2.view(c, ng * b, h), v2_rg=v2[:, :2],
                v1_rg3=v1[:, :2].view(c, 2 * b, h), v2_rg3=v2[:, :2].view(c, 2 * b, h),
                v2i=v2[:, -1], xT_rg=x[:, :2, :, :f].view(c, 2 * b, f).transpose(1, 2),
                a1T_rg=a1[:, :2, :, :h].view(c, 2 * b, h).transpose(1, 2),
                g=self.layout.params(self.g[:c]), dd=self.dd[:c], grad=self.grad[:c],
                e1=self.e1[:c], t=self.t[:c], gw1=self.gw1[:c], gw2=self.gw2[:c])
            self._views[c] = v
        return self._views[c]


def _losses_and_grads(critics: BatchedCritics, ws: _Workspace, v: SimpleNamespace, p: _Params,
                      users: torch.Tensor, wgan: bool, lambda_gp: float) -> torch.Tensor:
    """A chunk of c users (parameter views p, buffers v = ws.chunk(c), input rows already in
    v.x: row groups real, generated, and interpolated for wgan). Returns the (c,) losses of
    `critic_losses` and leaves the gradients of their sum w.r.t. the users' flat rows in v.g,
    without autograd (see the module docstring)."""
    fw = _forward(critics, ws, v, p, users)
    losses, dd = _output_backward(ws, v, p, fw.d, wgan)
    _hidden_backward(ws, v, p, fw, dd)
    if wgan:
        losses += _penalty_backward(ws, v, fw, lambda_gp)
        if not fw.sn:  # the penalty's products completed the W1 and W2 gradients
            return losses
    gw1, _, gw2 = v.g[:3]
    if not fw.sn:
        gw1.copy_(torch.bmm(v.xT, v.v1_3))
        gw2.copy_(torch.bmm(v.a1T, v.v2_3))
        return losses
    _spectral_weight_grads(ws, v, fw)
    return losses


def _group_bmm(ws: _Workspace, c: int, x: torch.Tensor, w: torch.Tensor,
               out: torch.Tensor) -> None:
    """out = x w per row group, each group with its own weight (spectral norm)."""
    ng, b = ws.ng, ws.b
    torch.bmm(x.reshape(c * ng, b, -1), w.reshape(c * ng, *w.shape[2:]),
              out=out.view(c * ng, b, -1))


def _forward(critics: BatchedCritics, ws: _Workspace, v: SimpleNamespace, p: _Params,
             users: torch.Tensor) -> SimpleNamespace:
    """The forward pass: a1 = LeakyReLU([x, 1] L1) (its unit column stays 1), a2 =
    LeakyReLU([a1, 1] L2) into v, and the real and generated rows' outputs d (c, 2, b). Returns
    them with the spectral-norm parts `sn` (one (w1, w2) pair per row group; empty without
    spectral norm), the per-group second layer L2 and the interpolated rows' weights W1x,
    W2x."""
    f, h, c, ng, b = ws.layout.f, ws.layout.h, v.c, ws.ng, ws.b
    sn: list[tuple] = []
    L2 = None
    if critics.spectral:  # one power iteration per evaluation, as forward(update_sn=True) does
        for _ in range(ng):
            sn.append((critics._sn_parts(p.w1, critics.sn_u1, users, True),
                       critics._sn_parts(p.w2, critics.sn_u2, users, True)))
        L1, L2 = p.l1[:, None].repeat(1, ng, 1, 1), p.l2[:, None].repeat(1, ng, 1, 1)
        for j, (s1, s2) in enumerate(sn):
            L1[:, j, :f, :h], L2[:, j, :h] = s1[0], s2[0]
        W1x, W2x = L1[:, -1, :f, :h], L2[:, -1, :h]  # the interpolated rows' weights
        _group_bmm(ws, c, v.x, L1, v.a1)
        F.leaky_relu(v.a1, SLOPE, inplace=True)
        _group_bmm(ws, c, v.a1, L2, v.a2)
    else:  # one weight for all row groups: one product over all rows
        W1x, W2x = p.w1, p.w2
        F.leaky_relu(torch.bmm(v.x3, p.l1, out=v.a1_3), SLOPE, inplace=True)
        torch.bmm(v.a1_3, p.l2, out=v.a2_3)
    F.leaky_relu(v.a2, SLOPE, inplace=True)
    d = torch.bmm(p.w3row, v.a2_rgT).add_(p.b3[:, :, None]).view(c, 2, b)
    return SimpleNamespace(sn=sn, L2=L2, W1x=W1x, W2x=W2x, d=d)


def _output_backward(ws: _Workspace, v: SimpleNamespace, p: _Params, d: torch.Tensor,
                     wgan: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The losses without the penalty, dLoss/dD (dd) and v2 = dD/dz2 = s2 * (dd * w3)
    (s = LeakyReLU' of z, read off the activation's sign by autograd's own kernel), with
    dd = dLoss/dD on the real and generated rows and dd = 1 on the interpolated ones (there
    v1 and v2 are the chain of dD/dx)."""
    c, ng, b, h = v.c, ws.ng, ws.b, ws.layout.h
    if wgan:
        dm = d.mean(2)
        losses = dm[:, 1] - dm[:, 0]
        _lrelu_backward_out((ws.scale * p.w3[:, None, None, :]).expand(c, ng, b, h), v.a2,
                            SLOPE, True, grad_input=v.v2)
        return losses, v.dd
    losses = F.softplus(-d[:, 0]).mean(1) + F.softplus(d[:, 1]).mean(1)
    dd = torch.stack([-_softplus_grad(-d[:, 0], 1.0 / b), _softplus_grad(d[:, 1], 1.0 / b)], 1)
    _lrelu_backward_out(torch.mul(dd[..., None], p.w3[:, None, None, :], out=v.v2), v.a2,
                        SLOPE, True, grad_input=v.v2)
    return losses, dd.view(c, 1, 2 * b)


def _hidden_backward(ws: _Workspace, v: SimpleNamespace, p: _Params, fw: SimpleNamespace,
                     dd: torch.Tensor) -> None:
    """v1 = dD/dz1 = s1 * (v2 W2^T), then the w3 and bias gradients. Products are formed in
    autograd's order and the bias gradients summed per row group as autograd does: under WGAN
    (dd = +-1/b) a bias gradient can be exactly 0 in exact arithmetic, and Adam turns
    round-off there into steps."""
    c, b, h = v.c, ws.b, ws.layout.h
    if fw.sn:
        _group_bmm(ws, c, v.v2, fw.L2[..., :h, :].transpose(-1, -2), v.v1)
    else:
        torch.bmm(v.v2_3, p.w2.transpose(1, 2), out=v.v1_3)
    _lrelu_backward_out(v.v1, v.a1h, SLOPE, True, grad_input=v.v1)
    _, gb1, _, gb2, gw3, gb3 = v.g
    gw3.copy_(torch.bmm(dd, v.a2_rg).squeeze(1))
    gb1.copy_(v.v1_rg.sum(2).sum(1))  # per row group, then the two groups
    gb2.copy_(v.v2_rg.sum(2).sum(1))
    gb3.copy_(dd.view(c, 2, b).sum(2).sum(1))


def _penalty_backward(ws: _Workspace, v: SimpleNamespace, fw: SimpleNamespace,
                      lambda_gp: float) -> torch.Tensor:
    """The gradient penalty on the interpolated rows, g = dD/dx = W1 v1: returns its (c,)
    losses and adds its gradients: to w3, and without spectral norm the complete W1 and W2
    gradients (its outer products cvec v1^T and e1 v2^T added to the real and generated
    rows'); under spectral norm its rows join the per-group products instead (stored in the
    interpolated rows of v.x and v.a1)."""
    b = ws.b
    gw1, _, gw2, _, gw3, _ = v.g
    grad = torch.bmm(v.v1i, fw.W1x.transpose(1, 2), out=v.grad)  # (c, b, F)
    norm = grad.norm(dim=-1)
    nm1 = norm - 1
    penalty = lambda_gp * nm1.square().mean(1)
    coef = torch.where(norm > 0, (2.0 * lambda_gp / b) * nm1 / norm, 0.0)
    cvec = grad.mul_(coef[..., None])  # dLoss/dg
    e1 = torch.bmm(cvec, fw.W1x, out=v.e1)
    _lrelu_backward_out(e1, v.a1i, SLOPE, True, grad_input=e1)  # dLoss/d(W2 v2)
    t = torch.bmm(e1, fw.W2x, out=v.t)
    gw3 += _lrelu_backward_out(t, v.a2i, SLOPE, True, grad_input=t).sum(1)
    if not fw.sn:
        torch.bmm(cvec.transpose(1, 2), v.v1i, out=v.gw1).baddbmm_(v.xT_rg, v.v1_rg3)
        torch.bmm(e1.transpose(1, 2), v.v2i, out=v.gw2).baddbmm_(v.a1T_rg, v.v2_rg3)
        gw1.copy_(v.gw1)
        gw2.copy_(v.gw2)
        return penalty
    v.xi.copy_(cvec)  # spectral norm: these rows join the per-group products
    v.a1i.copy_(e1)
    return penalty


def _spectral_weight_grads(ws: _Workspace, v: SimpleNamespace, fw: SimpleNamespace) -> None:
    """Spectral norm: the W1 and W2 gradients as per-group products, then through
    w / sigma(w): dL/dw = G / sigma - <G, w / sigma> / sigma u v^T."""
    f, c, ng, b = ws.layout.f, v.c, ws.ng, ws.b
    gw1, _, gw2 = v.g[:3]

    def gram(q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torch.bmm(q.reshape(c * ng, b, -1).transpose(1, 2),
                         r.reshape(c * ng, b, -1)).view(c, ng, q.shape[-1], -1)

    for k, (gw, gg) in enumerate(((gw1, gram(v.x[..., :f], v.v1)), (gw2, gram(v.a1h, v.v2)))):
        gw.zero_()
        for j, parts in enumerate(fw.sn):
            w_eff, sigma, u, vv = parts[k]
            gj = gg[:, j]
            inner = (gj * w_eff).sum((1, 2)) / sigma
            gw += gj / sigma[:, None, None] - inner[:, None, None] * (u[:, :, None]
                                                                       * vv[:, None, :])


def _chunk_losses_and_grads(critics: BatchedCritics, x: torch.Tensor, users: torch.Tensor,
                            wgan: bool, lambda_gp: float
                            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """`_losses_and_grads` on x (c, g, b, F) for the critics `users`: the (c,) losses and the
    gradients w.r.t. the rows `users` of (w1, b1, w2, b2, w3, b3) (tests call this)."""
    c, ng, b, f = x.shape
    ws = _Workspace(c, ng, b, critics.layout, x)
    v = ws.chunk(c)
    v.x[..., :f] = x
    p = _Params(critics.layout, critics.flat()[users])
    losses = _losses_and_grads(critics, ws, v, p, users, wgan, lambda_gp)
    return losses, [t.clone() for t in v.g]


@torch.no_grad()
def critic_update(critics: BatchedCritics, opt: BatchedAdam, mb: Minibatch,
                  users: torch.Tensor, loss: CriticLoss, tile: int = STEP_TILE) -> torch.Tensor:
    """One optimisation step of the critics `users` on given minibatches `mb`; returns the (A,)
    losses. Equals `critic_losses`
    + backward + `opt.step(users)` (with three/two power iterations under spectral norm, as
    `critic_losses` does), with closed-form gradients, chunked over users: each chunk's Adam
    update is applied right away (in place when the users are consecutive), which is exact
    because a later chunk reads only its own users' rows."""
    real_b, gen_b, alpha = mb
    a, b, f = real_b.shape
    wgan, lambda_gp = loss.kind == "wgan", loss.lambda_gp
    ng = 3 if wgan else 2
    losses = real_b.new_empty(a)
    if a == 0:
        return losses
    lay = critics.layout
    chunk = max(1, tile // (ng * b * lay.h))  # users per chunk
    flat = critics.flat()
    fm, fv = opt.flat_moments(critics)
    span = _as_slice(users)
    sel = users if span is None else span
    c1, c2 = opt.tick(sel)
    c1, c2 = c1[:, None], c2[:, None]
    t = opt.t[sel]
    shared_t = (torch.tensor(float(t[0]), device=t.device) if bool((t == t[0]).all())
                else None)
    ws = _Workspace(min(chunk, a), ng, b, lay, real_b)
    if wgan:
        beta = 1 - alpha
    if span is not None:  # consecutive users: views of all their rows, sliced per chunk
        fp, fm, fv = flat[span], fm[span], fv[span]
        allp = _Params(lay, fp)
    for i in range(0, a, chunk):
        j = min(a, i + chunk)
        v = ws.chunk(j - i)
        v.xr.copy_(real_b[i:j])
        v.xg.copy_(gen_b[i:j])
        if wgan:  # alpha * real + (1 - alpha) * generated, as critic_losses forms it
            torch.mul(alpha[i:j], real_b[i:j], out=v.xi).add_(
                torch.mul(beta[i:j], gen_b[i:j], out=v.grad))
        if span is None:
            rows = users[i:j]
            p = _Params(lay, flat[rows])
            m, vv = fm[rows], fv[rows]
        else:
            p = allp.rows(i, j)
            m, vv = fm[i:j], fv[i:j]
        losses[i:j] = _losses_and_grads(critics, ws, v, p, users[i:j], wgan, lambda_gp)
        opt.update(p.p, m, vv, ws.g[:j - i], c1[i:j], c2[i:j], shared_t)
        if span is None:
            flat[rows], fm[rows], fv[rows] = p.p, m, vv
    return losses
