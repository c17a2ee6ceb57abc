"""Policy and value networks over the environment state (4-way masked softmax).

Inputs: a learned embedding of the current location and of home (one shared table), an
embedding of the slot, the standardised coordinates of both, and the counters (distinct/48,
stay/48, at-home). The policy models the action type. Its destinations, by `destination`:
- "public" (default): explore and return targets come from the environment's public
  distributions (docs/architecture.md section 6), so log pi(a|s) is over 4 actions;
- "learned": a destination head (`DestinationHead`) tilts those public distributions by a
  state-dependent exponential family over public distance-band features of each candidate
  (band from the current location, band from home; for returns also the log visit count):
  pi(target | s, a) proportional to base(target) * exp(g_a(s) . phi(target)). Its weights start
  at zero, so an untrained learned policy draws exactly the public distributions. The policy's
  log-probability of a step is then log pi(a|s) + log pi(target|s,a) for explore and return
  (`joint_log_prob`), the quantity PPO's ratio uses. The head reads only the trunk's hidden
  state and `models.env.DestContext` (public map + the episode's own generated history), so no
  private input enters the policy (the released rewards train it, as before).
"""

from __future__ import annotations

import torch
from torch import nn

from models.config import DESTINATIONS
from models.env import EXPLORE, N_ACTIONS, N_BANDS, RETURN, SLOTS, DestContext
from udfs.errors import InvalidParameterError

NEG = -1e9


class _Trunk(nn.Module):
    def __init__(self, n_locations: int, loc_dim: int, slot_dim: int, hidden: int):
        super().__init__()
        self.loc_emb = nn.Embedding(n_locations, loc_dim)
        self.slot_emb = nn.Embedding(SLOTS, slot_dim)
        self.mlp = nn.Sequential(nn.Linear(2 * loc_dim + slot_dim + 7, hidden), nn.Tanh(),
                                 nn.Linear(hidden, hidden), nn.Tanh())

    def forward(self, obs: dict[str, torch.Tensor], coords_norm: torch.Tensor) -> torch.Tensor:
        loc, home = obs["loc"], obs["home"]
        x = torch.cat([
            self.loc_emb(loc), self.loc_emb(home), self.slot_emb(obs["slot"]),
            coords_norm[loc], coords_norm[home],
            torch.stack([obs["n_distinct"].float() / SLOTS, obs["stay_len"].float() / SLOTS,
                         (loc == home).float()], -1)], -1)
        return self.mlp(x)


def _tilt(g: torch.Tensor, band: torch.Tensor) -> torch.Tensor:
    """(n, C) sum of the coefficients g (n, 2 * N_BANDS + ...) of each candidate's two bands."""
    return g.gather(1, band[..., 0]) + g.gather(1, band[..., 1] + N_BANDS)


class DestinationHead(nn.Module):
    # the head interface the policy and PPO use: log_prob(h, ctx, a, target), sample(h, ctx, a,
    # gen) -> targets of the rows, kl(...) (residual heads only; see models/residual.py)
    """Destination logits: public base log-weights + g(h) . phi(candidate), g zero-initialised.
    phi: one-hot band from the current location, one-hot band from home (explore and return),
    log visit count (return)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.explore = nn.Linear(hidden, 2 * N_BANDS)
        self.ret = nn.Linear(hidden, 2 * N_BANDS + 1)
        for lin in (self.explore, self.ret):
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, h: torch.Tensor, ctx: DestContext) -> tuple[torch.Tensor, torch.Tensor]:
        ge, gr = self.explore(h), self.ret(h)
        exp = ctx.exp_base + _tilt(ge, ctx.exp_band)
        ret = ctx.ret_base + _tilt(gr, ctx.ret_band) + gr[:, -1:] * ctx.ret_logcount
        return exp, ret

    def log_prob(self, h: torch.Tensor, ctx: DestContext, actions: torch.Tensor,
                 targets: torch.Tensor) -> torch.Tensor:
        exp_l, ret_l = self(h, ctx)
        return _dest_log_prob(exp_l, ret_l, ctx, actions, targets)

    @torch.no_grad()
    def sample(self, h: torch.Tensor, ctx: DestContext, actions: torch.Tensor,
               gen: torch.Generator) -> torch.Tensor:
        dest = self(h, ctx)
        out = torch.empty_like(actions)
        for k, (act, cand) in enumerate(((EXPLORE, ctx.exp_cand), (RETURN, ctx.ret_cand))):
            rows = (actions == act).nonzero().squeeze(1)
            if rows.numel():
                p = torch.softmax(dest[k][rows], -1)
                j = torch.multinomial(p.cpu(), 1, generator=gen).squeeze(1).to(p.device)
                out[rows] = cand[rows, j]
        return out


def _dest_log_prob(exp_logits: torch.Tensor, ret_logits: torch.Tensor, ctx: DestContext,
                   actions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log pi(target | s, a) per row (explore or return rows); a return location held by
    several history slots sums their probabilities."""
    le = torch.log_softmax(exp_logits, -1)
    lr = torch.log_softmax(ret_logits, -1)
    hit_e = ctx.exp_cand == targets[:, None]
    hit_r = (ctx.ret_cand == targets[:, None]) & (ctx.ret_base > NEG / 2)
    lp_e = torch.logsumexp(le.masked_fill(~hit_e, NEG), -1)
    lp_r = torch.logsumexp(lr.masked_fill(~hit_r, NEG), -1)
    return torch.where(actions == EXPLORE, lp_e, lp_r)


def moving_rows(actions: torch.Tensor) -> torch.Tensor:
    """Indices of the explore and return rows (those with a destination to choose)."""
    return ((actions == EXPLORE) | (actions == RETURN)).nonzero().squeeze(1)


def joint_log_prob(logits: torch.Tensor, head: nn.Module | None, h: torch.Tensor,
                   ctx: DestContext | None, actions: torch.Tensor, targets: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi(a, target | s), entropy estimate) of each row: the action's log-probability plus,
    with a destination head (`head(h, ctx)` -> (explore, return) logits), the destination's,
    computed for the explore and return rows only (`ctx`: the context of those rows, in row
    order). The entropy is the action's only: an entropy bonus on the destination would pull it
    toward uniform over the K nearest, away from the public prior, whatever the rewards say."""
    dist = torch.distributions.Categorical(logits=logits)
    lp, ent = dist.log_prob(actions), dist.entropy()
    if head is None:
        return lp, ent
    sel = moving_rows(actions)
    dlp = head.log_prob(h[sel], ctx, actions[sel], targets[sel])
    return lp.index_add(0, sel, dlp), ent


@torch.no_grad()
def sample_destinations(head: nn.Module, h: torch.Tensor, ctx: DestContext,
                        actions: torch.Tensor, targets: torch.Tensor,
                        gen: torch.Generator) -> torch.Tensor:
    """`targets` with every explore and return row redrawn from the head's distribution (`ctx`:
    the context of those rows only, in row order; the draw on the CPU from `gen`, as every draw
    of the environment)."""
    out = targets.clone()
    sel = moving_rows(actions)
    if sel.numel():
        out[sel] = head.sample(h[sel], ctx, actions[sel], gen)
    return out


class PolicyNet(nn.Module):
    """pi(a | s): logits over (stay, explore, home, return), invalid actions masked out; with
    destination="learned" also pi(target | s, a) (`self.dest`, see the module doc); with
    destination="residual" the logits are the DP Markov release's plus a zero-initialised
    residual, and the destination head is `models.residual.ResidualDestinations` (its tables
    filled by `use_release`; `n_cells`: the release's number of move cells). `train_actions`
    False (residual only) freezes r_theta at zero: pi(a | s) stays the release's exactly, and
    training moves the destination residual and the trunk it reads."""

    def __init__(self, n_locations: int, loc_dim: int = 16, slot_dim: int = 8, hidden: int = 64,
                 destination: str = "public", n_cells: int = 1, train_actions: bool = True):
        super().__init__()
        if destination not in DESTINATIONS:
            raise InvalidParameterError(f"destination must be one of {DESTINATIONS}; got "
                                        f"{destination!r}")
        self.destination = destination
        self.trunk = _Trunk(n_locations, loc_dim, slot_dim, hidden)
        self.head = nn.Linear(hidden, N_ACTIONS)
        self.dest: nn.Module | None = None
        if destination == "learned":
            self.dest = DestinationHead(hidden)
        elif destination == "residual":
            from models.residual import ResidualDestinations

            self.dest = ResidualDestinations(hidden, n_locations, n_cells)
            nn.init.zeros_(self.head.weight)  # r_theta = 0: the release's action distribution
            nn.init.zeros_(self.head.bias)
            # frozen: no gradient, so the optimisers (which skip parameters without one) never
            # move it, and the KL penalty's action part stays exactly zero
            self.head.requires_grad_(train_actions)

    @property
    def residual(self) -> bool:
        return self.destination == "residual"

    def use_release(self, model, coords) -> None:
        """Residual policy: take the release's tables (a `models.markov.MarkovModel`)."""
        self.dest.release.load_release(model, coords)

    def base_logits(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The release's masked action logits (residual policies only)."""
        return self.dest.release.action_logits(obs).masked_fill(~obs["mask"], NEG)

    def kl_to_release(self, logits: torch.Tensor, h: torch.Tensor, obs: dict[str, torch.Tensor],
                      ctx: DestContext | None, actions: torch.Tensor) -> torch.Tensor:
        """Per row, KL(pi(a | s) || P_release(a | s)) plus, on the explore and return rows, the
        destination's KL given the taken action (an estimate of the joint KL under the
        rollout's actions: the action part is exact, the destination part sampled)."""
        from models.residual import action_kl

        kl = action_kl(logits, self.base_logits(obs))
        sel = moving_rows(actions)
        if sel.numel():
            kl = kl.index_add(0, sel, self.dest.kl(h[sel], ctx, actions[sel]))
        return kl

    def forward(self, obs: dict[str, torch.Tensor], coords_norm: torch.Tensor) -> torch.Tensor:
        return self.logits_and_hidden(obs, coords_norm)[0]

    def logits_and_hidden(self, obs: dict[str, torch.Tensor], coords_norm: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs, coords_norm)
        logits = self.head(h)
        if self.residual:
            logits = logits + self.dest.release.action_logits(obs)
        return logits.masked_fill(~obs["mask"], NEG), h

    def joint_log_prob(self, obs: dict[str, torch.Tensor], coords_norm: torch.Tensor,
                       ctx: DestContext | None, actions: torch.Tensor, targets: torch.Tensor,
                       kl: bool = False) -> tuple:
        """(log pi(a[, target] | s), entropy estimate) of flat steps (`joint_log_prob`); with
        `kl`, also each row's KL to the release (`kl_to_release`; None unless residual)."""
        logits, h = self.logits_and_hidden(obs, coords_norm)
        out = joint_log_prob(logits, self.dest, h, ctx, actions, targets)
        if not kl:
            return out
        return (*out, self.kl_to_release(logits, h, obs, ctx, actions) if self.residual
                else None)

    def distribution(self, obs: dict[str, torch.Tensor],
                     coords_norm: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self(obs, coords_norm))

    @classmethod
    def restore(cls, config, n_locations: int, state: dict) -> PolicyNet:
        """A trained policy from its state dict and the dimensions of its training config."""
        net = cls(n_locations, config.loc_dim, config.slot_dim, config.policy_hidden,
                  getattr(config, "destination", "public"), _cells_of(state))
        net.load_state_dict(state)
        return net

    @classmethod
    def from_state(cls, n_locations: int, loc_dim: int, slot_dim: int, hidden: int,
                   state: dict) -> PolicyNet:
        """A policy from a saved state dict alone (policy.pt): a state holding the destination
        head's weights ("dest.*") restores a learned-destination policy, else a public one."""
        kind = ("residual" if "dest.release.log_act" in state
                else "learned" if any(k.startswith("dest.") for k in state) else "public")
        net = cls(n_locations, loc_dim, slot_dim, hidden, kind, _cells_of(state))
        net.load_state_dict(state)
        return net


def _cells_of(state: dict) -> int:
    """The number of move cells of a residual policy's saved tables (1 for other policies)."""
    t = state.get("dest.release.log_trans")
    return 1 if t is None else int(t.shape[0])


class ValueNet(nn.Module):
    """V(s), same trunk architecture, separate parameters."""

    def __init__(self, n_locations: int, loc_dim: int = 16, slot_dim: int = 8, hidden: int = 64):
        super().__init__()
        self.trunk = _Trunk(n_locations, loc_dim, slot_dim, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, obs: dict[str, torch.Tensor], coords_norm: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(obs, coords_norm)).squeeze(-1)
