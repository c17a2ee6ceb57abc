"""The residual policy on the DP Markov release (`train.destination: residual`).

Parametrisation (issue 51). With the released tables of `models.markov.MarkovModel`:
  log pi(a | s)       = log P_release(a | slot, at home, can return) + r_theta(s, a)
  log pi(x | s, MOVE) = log P_release(x | move from l) + d_theta(s, x)    over all L locations
  log pi(y | s, RET)  = log (visit count of y today)   + d_theta(s, y)    over today's places
(each normalised over the valid actions / candidates), where P_release(x | move from l) =
cell_trans[cell(l), cell(x)] * within[x], reweighted toward the places not visited today (the
release's own sampler redraws visited places up to `models.markov.MOVE_TRIES` times inside the
drawn cell; `ReleaseTables.move_logits` is the exact distribution of that draw). r_theta is the
policy's action head, d_theta the heads of `ResidualDestinations`; every last layer starts at
zero, so an untrained residual policy draws the release's days (tests/models/test_residual.py
checks the six statistics). The residual reads what a first-order chain cannot condition on:
the trunk's places seen today, stay length and slot, and the destination features below.

Destination features phi(s, x): the public distance band of x from the current location and
from home (`models.env.BAND_EDGES_KM`), and a learned embedding of x (dotted with a
zero-initialised projection of the state): d_theta(s, x) = g(h) . phi(s, x) + u(h) . e(x).

Privacy: the tables are a DP release (charged to the run's accountant before its noise is
drawn, models/pretrain.py); the policy reads them and the episode's own generated history
only, so building, sampling and training the residual policy on released rewards is
post-processing of DP releases (models/PROOF.md section 10). The KL(pi || P_release) of a
state (`kl_to_release`) is a function of the policy and the tables: it adds no privacy cost.

Runtime: a move's logits are O(L) per row (the explore destination is over every location), so
a rollout step costs O(E_move * L) on top of the trunk; memory (E_move, L) floats.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from models.env import BAND_EDGES_KM, EXPLORE, HOME, N_BANDS, RETURN, SLOTS, STAY, DestContext
from models.policy import _tilt
from udfs.geo import KM_PER_DEGREE

NEG = -1e9
LOG_FLOOR = -30.0  # log-probability of an action or place the release gave (near) zero mass
EMB_DIM = 8


def env_order_actions(action_probs: np.ndarray) -> np.ndarray:
    """The release's (47, 2, 2, 4) action table (STAY, HOME, RETURN, MOVE) reordered to the
    environment's actions (STAY, EXPLORE, HOME, RETURN): MOVE is EXPLORE (a place new today)."""
    from models import markov

    out = np.empty_like(np.asarray(action_probs, dtype=np.float64))
    for env_a, mk_a in ((STAY, markov.STAY), (EXPLORE, markov.MOVE), (HOME, markov.HOME),
                        (RETURN, markov.RETURN)):
        out[..., env_a] = action_probs[..., mk_a]
    return out


def _log(p: torch.Tensor) -> torch.Tensor:
    return torch.where(p > 0, p.clamp_min(1e-300).log(), torch.full_like(p, LOG_FLOOR)
                       ).clamp_min(LOG_FLOOR)


class ReleaseTables(nn.Module):
    """The release's tables as buffers (saved with the policy, moved with it to a device):
    log action probabilities in the environment's order, each location's cell, log cell
    transitions, log P(location | its cell), and the km coordinates of the map (public) for the
    distance bands."""

    def __init__(self, n_locations: int, n_cells: int):
        super().__init__()
        self.register_buffer("log_act", torch.zeros(SLOTS - 1, 2, 2, 4))
        self.register_buffer("cell_of", torch.zeros(n_locations, dtype=torch.long))
        self.register_buffer("log_trans", torch.zeros(n_cells, n_cells))
        self.register_buffer("log_within", torch.zeros(n_locations))
        self.register_buffer("xy_km", torch.zeros(n_locations, 2))

    @torch.no_grad()
    def load_release(self, model, coords: np.ndarray) -> None:
        """Fill the buffers from a `models.markov.MarkovModel` and the public map."""
        dev = self.log_act.device
        self.log_act.copy_(_log(torch.as_tensor(env_order_actions(model.action_probs))).to(dev))
        self.cell_of.copy_(torch.as_tensor(np.asarray(model.cell_of), dtype=torch.long))
        self.log_trans.copy_(_log(torch.as_tensor(np.asarray(model.cell_trans))).to(dev))
        self.log_within.copy_(_log(torch.as_tensor(np.asarray(model.within))).to(dev))
        c = np.asarray(coords, dtype=np.float64)
        scale = np.array([KM_PER_DEGREE, KM_PER_DEGREE * np.cos(np.deg2rad(c[:, 0].mean()))])
        self.xy_km.copy_(torch.as_tensor(c * scale, dtype=torch.float32))

    def action_logits(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(E, 4) log P_release(a | slot, at home, can return) (unnormalised over the mask)."""
        home = (obs["loc"] == obs["home"]).long()
        can = obs["mask"][:, RETURN].long()
        return self.log_act[obs["slot"].clamp(max=SLOTS - 2), home, can]

    def move_logits(self, loc: torch.Tensor, visited: torch.Tensor) -> torch.Tensor:
        """(E, L) log P_release(x | move from loc) as the release's sampler draws it: a cell c
        from cell_trans, then up to MOVE_TRIES draws from within[. | c], the first unvisited
        one kept, else the last. With m = the visited mass of c, an unvisited x ends the draw
        with probability within(x) (1 + m + ... + m^(MOVE_TRIES - 1)), a visited one with
        within(x) m^(MOVE_TRIES - 1): exact, not an approximation of the sampler."""
        from models.markov import MOVE_TRIES

        cells = self.cell_of[None].expand(loc.shape[0], -1)
        p_in = self.log_within.exp()[None] * visited
        m = torch.zeros(loc.shape[0], self.log_trans.shape[0], device=loc.device)
        m = m.scatter_add(1, cells, p_in).clamp(0.0, 1.0)[:, self.cell_of]  # (E, L)
        geo = sum(m ** k for k in range(MOVE_TRIES))
        w = torch.where(visited, m ** (MOVE_TRIES - 1), geo)
        return (self.log_trans[self.cell_of[loc]][:, self.cell_of] + self.log_within[None]
                + w.clamp_min(1e-30).log())

    def band(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Distance band of the km between locations a and b (broadcast)."""
        km = (self.xy_km[a] - self.xy_km[b]).norm(dim=-1)
        return torch.bucketize(km, torch.tensor(BAND_EDGES_KM, device=km.device))


def _current(ctx: DestContext) -> tuple[torch.Tensor, torch.Tensor]:
    """(current location, home) of each row, from the day's history in the context."""
    h = ctx.ret_cand
    n = (h >= 0).sum(1).clamp_min(1)
    return h[torch.arange(h.shape[0], device=h.device), n - 1], h[:, 0]


class ResidualDestinations(nn.Module):
    """d_theta over every location (moves) and over today's places (returns), on top of the
    release's destination tables; zero at initialisation (see the module docstring)."""

    def __init__(self, hidden: int, n_locations: int, n_cells: int):
        super().__init__()
        self.release = ReleaseTables(n_locations, n_cells)
        self.emb = nn.Embedding(n_locations, EMB_DIM)
        self.explore = nn.Linear(hidden, 2 * N_BANDS + EMB_DIM)
        self.ret = nn.Linear(hidden, 2 * N_BANDS + 1)
        for lin in (self.explore, self.ret):
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def _visited(self, ctx: DestContext, n_loc: int) -> torch.Tensor:
        h = ctx.ret_cand
        h = torch.where(h >= 0, h, h[:, :1])  # an empty slot counts as home (always visited)
        out = torch.zeros(h.shape[0], n_loc, dtype=torch.bool, device=h.device)
        return out.scatter_(1, h, True)

    def logits(self, h: torch.Tensor, ctx: DestContext, base_only: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """((E, L) move logits, (E, 48) return logits over the history slots)."""
        rel = self.release
        n_loc = rel.log_within.shape[0]
        loc, home = _current(ctx)
        exp = rel.move_logits(loc, self._visited(ctx, n_loc))
        ret = ctx.ret_base
        if base_only:
            return exp, ret
        ge, gr = self.explore(h), self.ret(h)
        every = torch.arange(n_loc, device=h.device)[None]
        b_cur, b_home = rel.band(loc[:, None], every), rel.band(home[:, None], every)
        exp = (exp + _tilt(ge, torch.stack([b_cur, b_home], -1))
               + ge[:, 2 * N_BANDS:] @ self.emb.weight.T)
        ret = ret + _tilt(gr, ctx.ret_band) + gr[:, -1:] * ctx.ret_logcount
        return exp, ret

    def log_prob(self, h: torch.Tensor, ctx: DestContext, actions: torch.Tensor,
                 targets: torch.Tensor) -> torch.Tensor:
        """log pi(target | s, a) of explore and return rows (a place held by several history
        slots sums their probabilities)."""
        exp, ret = self.logits(h, ctx)
        lp_e = torch.log_softmax(exp, -1).gather(1, targets.clamp_min(0)[:, None]).squeeze(1)
        hit = (ctx.ret_cand == targets[:, None]) & (ctx.ret_base > NEG / 2)
        lp_r = torch.logsumexp(torch.log_softmax(ret, -1).masked_fill(~hit, NEG), -1)
        return torch.where(actions == EXPLORE, lp_e, lp_r)

    @torch.no_grad()
    def sample(self, h: torch.Tensor, ctx: DestContext, actions: torch.Tensor,
               gen: torch.Generator) -> torch.Tensor:
        """A target for each explore and return row (drawn on the CPU from `gen`)."""
        exp, ret = self.logits(h, ctx)
        out = torch.empty_like(actions)
        for act, logits, cand in ((EXPLORE, exp, None), (RETURN, ret, ctx.ret_cand)):
            rows = (actions == act).nonzero().squeeze(1)
            if rows.numel():
                p = torch.softmax(logits[rows], -1)
                j = torch.multinomial(p.cpu(), 1, generator=gen).squeeze(1).to(p.device)
                out[rows] = j if cand is None else cand[rows, j]
        return out

    def kl(self, h: torch.Tensor, ctx: DestContext, actions: torch.Tensor) -> torch.Tensor:
        """KL(pi(. | s, a) || P_release(. | s, a)) of the destination of each explore/return row."""
        exp, ret = self.logits(h, ctx)
        b_exp, b_ret = self.logits(h, ctx, base_only=True)
        return torch.where(actions == EXPLORE, _kl(exp, b_exp), _kl(ret, b_ret))


def _kl(logits: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """Row-wise KL(softmax(logits) || softmax(base)) over the entries base does not exclude."""
    lp, lq = torch.log_softmax(logits, -1), torch.log_softmax(base, -1)
    keep = base > NEG / 2
    return (lp.exp() * (lp - lq)).masked_fill(~keep, 0.0).sum(-1)


def action_kl(logits: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """KL(pi(. | s) || P_release(. | s)) of the action of each row (both masked alike)."""
    return _kl(logits, base)
