"""Training loop, one code path for one process and for W ranks: `fit(config, data) -> FitResult`.

One round (`_Run.one_round`; `comm` is `LocalComm` here and a torch.distributed world in
`models.distributed`; every random draw is shard-invariant, so W ranks reproduce one process):
  1. participation: a random fraction of ALL users takes part (numpy Generator, same on every
     rank); a rank keeps the participants among its own users. `sampling="fixed"`: exactly
     round(participation * N) users, charged in full (no amplification claimed);
     `sampling="poisson"`: each user independently with probability q = participation, its
     release normalised by the public q * N and charged as PoissonSampledDpEvent(q, .). A round
     that samples nobody still releases (pure noise) and is charged: skipping it would publish
     that the sample was empty, which the amplification bound does not cover;
  2. the E episodes are cut into `blocks` equal blocks, each rolled out with its own generator
     (seeded from the rollout stream); rank r rolls out a contiguous run of blocks, and the
     generated pairs are all-gathered in block order                          [all-gather]
  3. every participating critic takes `critic_steps` batched steps; minibatch indices are drawn
     for all users at once and each rank takes its users' rows                 [rank-local]
  4. local_moments(critics, features, users) -> Moments(sum, sumsq, count)     [all-reduce]
  5. rank 0: scheme.release(moments, gen=noise_gen, spend=accountant.spend, prior=pilot); the
     released rewards, the accountant and the noise stream's state are broadcast  [broadcast]
     (LDP schemes: every rank perturbs each of its users' rewards with that user's row of one
     shared noise table BEFORE summing; no unperturbed sum is formed, so step 4 is skipped)
  6. PPO on each rank's own episodes; per-block minibatch permutations; losses are sums scaled
     by W / (global minibatch size) so that DDP's gradient average is the one-process mean [DDP]
Budget is planned before the start distribution is drawn (`models.budget.check_one_round`: a
target that cannot pay one round fails, naming the costs) and checked inside step 5 before each
noise draw; a refused release ends training with `stopped_reason` set and the policy of the last
completed round (a run that ends with 0 rounds fails).
With `pretrain="markov"` a fresh run first releases the DP Markov model on its users (the
statistics all-reduced, the noise added on rank 0, charged to the run's accountant), takes its
start distribution and destination tables, and behaviour-clones the policy on days sampled from
it (`_Run.setup_markov`, models/pretrain.py, models/PROOF.md section 10).
Before round 1 a fresh run (not a resumed one) may pretrain every critic for
`critic_pretrain_steps` steps against rollouts of the initial policy (`_Run.setup`,
`pretrain_critics`): local data only, nothing released, no epsilon (models/PROOF.md section 1).

What a round record holds. Its top-level keys are public: DP releases (reward_mean: mean of the
released rewards; epsilon_batch) and their post-processing (PPO losses, entropy, clip fraction,
action frequencies of the generated days), counts fixed by the config (participants; None in
Poisson rounds, whose sample size is not public) and timings; `ROUND_PUBLIC` lists them. Under
`"trusted"` it keeps figures computed from private data without noise or not public (critic
loss, the exact mean reward, the pilot's correlation with it, the round's participant count, and
`critic_gap`: the participants' mean over users of mean R_u(u's own real pairs; a fixed sample
of `gap_pairs` of them, `models.critics.real_pair_sample`) - mean
R_u(generated batch), R = sigmoid(D), from exact critic outputs after the round's critic steps;
per-rank sums all-reduced like the moments; None under LDP, where no exact sum is formed):
they stay in the run folder (history.json, mode 0700) and are never logged at INFO or published.
W ranks equal one process up to the order of floating-point sums (all-reduce, DDP); see
tests/models/test_distributed.py for the tolerance.

Device (`_Run(device=...)`, `fit(device=...)`; the distributed job passes its placement's
device): the policy, value net, critics and their Adam moments, the expert features and the
environment's tables live on it, and rollouts, critic training and scoring and PPO run there.
On the CPU stay: every random draw (CPU torch.Generators and the numpy participation stream;
each draw is moved with `.to(device)`, so the numbers do not depend on the device or the
sharding), user indices, per-user real-pair counts, the DP start histogram and the DP
releases (the moments are small (B,) vectors, moved to the CPU before rank 0 adds noise), and
the accountant. Everything saved is moved to the CPU (`to_cpu`), so it loads anywhere.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from models.accounting import PrivacyAccountant
from models.aggregation.base import laplace
from models.aggregation.pilot import HistoryPilot
from models.aggregation.registry import make_scheme
from models.budget import check_one_round
from models.checkpoint import Checkpointing, load_checkpoint, save_checkpoint, to_cpu
from models.config import SCHEME_TRAITS, TrainConfig
from models.critic_step import CriticStep
from models.critic_store import UserCritics, critic_shard
from models.critics import BatchedAdam, BatchedCritics, real_pair_sample
from models.data import TrainData
from models.env import DestContext, DestPrior, MobilityEnv
from models.features import FEATURE_DIM, expert_features_per_user
from models.markov import MarkovModel, Stats, move_cells, release_markov, user_stats
from models.policy import PolicyNet, ValueNet
from models.ppo import PPOSettings, Rollout, rollout
from models.pretrain import behaviour_clone, dest_prior, markov_epsilon
from models.starts import HierarchicalStarts, LocalStarts, kd_levels, start_mass
from models.train_round import RoundSteps, _gen
from udfs.errors import BudgetExceededError, ConfigError

log = logging.getLogger(__name__)

GENERATORS = ("init", "rollout", "critic", "noise", "ppo")

# the public figures of a round record (everything else sits under "trusted")
ROUND_PUBLIC = ("round", "participants", "reward_mean", "policy_loss", "value_loss", "entropy",
                "clip_frac", "epsilon_batch", "epsilon", "action_freq", "seconds")


def uses_history_pilot(cfg: TrainConfig) -> bool:
    return SCHEME_TRAITS[cfg.scheme].sensitivity_aware and cfg.pilot == "history"


def env_of(coords: np.ndarray, cfg: TrainConfig, prior: dict | None = None,
           device: torch.device | str | None = None) -> MobilityEnv:
    """The environment of a run: the public map, its explore weights tilted by the released
    destination tables `prior` (`DestPrior.to_dict`) when the run pre-trained on them.
    Synthesis from a trained policy builds the same one."""
    return MobilityEnv(coords, cfg.k_nearest, cfg.explore_exponent, device, DestPrior.of(prior))


def n_move_cells(coords: np.ndarray, cfg: TrainConfig) -> int:
    """The release's number of move cells (the residual policy's table size), 1 otherwise."""
    if cfg.destination != "residual":
        return 1
    return int(move_cells(coords, cfg.markov_cell_depth).max()) + 1


def make_generators(seed: int) -> tuple[dict[str, torch.Generator], np.random.Generator]:
    """Independent streams from one seed: one torch.Generator per purpose, numpy for sampling
    participants. `noise` is the dedicated DP-noise stream (rank 0 in the distributed job)."""
    seqs = np.random.SeedSequence(seed).spawn(len(GENERATORS) + 1)
    gens = {}
    for name, s in zip(GENERATORS, seqs, strict=False):
        g = torch.Generator()
        g.manual_seed(int(s.generate_state(1, np.uint64)[0] >> np.uint64(1)))
        gens[name] = g
    return gens, np.random.default_rng(seqs[-1])


def participants(n_users: int, fraction: float, rng: np.random.Generator,
                 sampling: str = "fixed") -> torch.Tensor:
    """Sorted indices of a round's users: `fixed`, round(fraction * n_users) (at least one)
    without replacement; `poisson`, each user independently with probability `fraction` (one
    uniform draw per user of ALL users, so the sample does not depend on sharding; may be
    empty)."""
    if fraction >= 1:
        return torch.arange(n_users)
    if sampling == "poisson":
        return torch.as_tensor(np.flatnonzero(rng.random(n_users) < fraction))
    k = max(1, int(round(fraction * n_users)))
    return torch.as_tensor(np.sort(rng.choice(n_users, size=k, replace=False)))


@dataclass
class FitResult:
    config: TrainConfig
    policy_state: dict
    n_locations: int
    start_probs: torch.Tensor
    accountant: dict  # summary: epsilon, delta, basic_epsilon, releases, ...
    accountant_state: dict
    history: list[dict] = field(default_factory=list)
    rounds_done: int = 0
    stopped_reason: str | None = None
    # the trained per-user critics (BatchedCritics state, users in the data's order) and their
    # ids: the white-box attacks and critic LiRA read them (models/attacks)
    critics_state: dict | None = None
    critic_users: list | None = None
    # pretrain="markov": the released destination tables the environment was tilted by
    # (`models.env.DestPrior.to_dict`); synthesis builds its environment with them
    dest_prior: dict | None = None

    def policy(self) -> PolicyNet:
        return PolicyNet.restore(self.config, self.n_locations, self.policy_state)

    def user_critics(self) -> UserCritics:
        return UserCritics(self.critics_state, list(self.critic_users), self.config.critic_hidden,
                           self.config.spectral_norm)


class Comm(Protocol):
    """The collectives a round needs; `LocalComm` (one process) makes every one the identity."""

    rank: int
    world: int

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor: ...
    def all_gather_cat(self, t: torch.Tensor) -> torch.Tensor: ...
    def broadcast_object(self, obj: Any) -> Any: ...
    def wrap(self, module: nn.Module) -> nn.Module: ...


class LocalComm:
    rank, world = 0, 1

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def all_gather_cat(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def broadcast_object(self, obj: Any) -> Any:
        return obj

    def wrap(self, module: nn.Module) -> nn.Module:
        return module


class ActorCritic(nn.Module):
    """Policy and value net as one module: DDP wraps this, the loss uses both outputs."""

    def __init__(self, policy: PolicyNet, value: ValueNet):
        super().__init__()
        self.policy, self.value = policy, value

    def forward(self, obs: dict[str, torch.Tensor], coords_norm: torch.Tensor,
                ctx: DestContext | None = None, actions: torch.Tensor | None = None,
                targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(log pi(a[, target] | s), entropy estimate, V(s), KL(pi || P_release) of a residual
        policy or None): every parameter used in one forward, as DDP wants."""
        return (*self.policy.joint_log_prob(obs, coords_norm, ctx, actions, targets, kl=True),
                self.value(obs, coords_norm))


def check_blocks(cfg: TrainConfig, blocks: int, world: int) -> None:
    if blocks < 1 or cfg.episodes_per_round % blocks or blocks % world:
        raise ConfigError(
            f"blocks={blocks}: episodes_per_round ({cfg.episodes_per_round}) must be a multiple "
            f"of blocks, and blocks a multiple of the number of processes ({world})")


def shard_critics(full: BatchedCritics, rows: torch.Tensor) -> BatchedCritics:
    """The critics of the users `rows` (global indices) as their own BatchedCritics."""
    with torch.no_grad():
        for name, p in list(full.named_parameters()):
            setattr(full, name, nn.Parameter(p[rows].clone()))
        for name, b in list(full.named_buffers()):
            setattr(full, name, b[rows].clone())
    full.n_users = int(rows.shape[0])
    return full


def cat_rollouts(parts: list[Rollout]) -> Rollout:
    if len(parts) == 1:
        return parts[0]
    traj = type(parts[0].traj)(**{f.name: torch.cat([getattr(p.traj, f.name) for p in parts])
                                  for f in dataclasses.fields(parts[0].traj)})
    return Rollout(traj, torch.cat([p.logp for p in parts]), torch.cat([p.values for p in parts]))


def _seeds(gen: torch.Generator, k: int) -> list[int]:
    return [int(x) for x in torch.randint(2**62, (k,), generator=gen)]


class _Run(RoundSteps):
    """All mutable training state of one rank; `state_dict` is what a checkpoint holds.

    data: this rank's users; rows: their global indices (ascending); n_total: all users;
    device: where the networks, critics, expert features and environment live (default CPU).
    """

    def __init__(self, cfg: TrainConfig, data: TrainData, comm: Comm | None = None,
                 rows: torch.Tensor | None = None, n_total: int | None = None, blocks: int = 1,
                 device: torch.device | str | None = None):
        self.comm = comm or LocalComm()
        self.device = torch.device("cpu" if device is None else device)
        self.cfg, self.data, self.blocks = cfg, data, blocks
        self.rows = torch.arange(data.n_users) if rows is None else rows.long()
        self.n_total = data.n_users if n_total is None else n_total
        check_blocks(cfg, blocks, self.comm.world)
        self.env = env_of(data.coords, cfg, None, self.device)
        self.real, self.counts = expert_features_per_user(self.env, data.days_per_user)
        self.gap_real, self.gap_counts = real_pair_sample(self.real, self.counts, self.rows,
                                                          cfg.seed, cfg.gap_pairs)
        self.gens, self.rng = make_generators(cfg.seed)
        n_loc = self.env.n_locations
        with torch.random.fork_rng(devices=[]):  # nn init uses the global RNG: fence it
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=self.gens["init"])))
            self.policy = PolicyNet(n_loc, cfg.loc_dim, cfg.slot_dim, cfg.policy_hidden,
                                    cfg.destination, n_move_cells(data.coords, cfg),
                                    cfg.residual_actions)
            self.value = ValueNet(n_loc, cfg.loc_dim, cfg.slot_dim, cfg.policy_hidden)
        self.module = ActorCritic(self.policy, self.value).to(self.device)  # CPU init, moved
        self.model = self.comm.wrap(self.module)
        self.ppo_opt = torch.optim.Adam(self.module.parameters(), lr=cfg.policy_lr)
        full = BatchedCritics(self.n_total, FEATURE_DIM, cfg.critic_hidden, self.gens["init"],
                              cfg.spectral_norm)  # drawn for all users: shard-invariant init
        self.critics = shard_critics(full, self.rows).to(self.device)
        self.critic_opt = BatchedAdam(list(self.critics.parameters()), lr=cfg.critic_lr)
        self.accountant = PrivacyAccountant(cfg.delta, cfg.target_epsilon, cfg.accountant)
        self.scheme = make_scheme(cfg)
        self.pilot = HistoryPilot(cfg.pilot_decay) if uses_history_pilot(cfg) else None
        self.start_probs: torch.Tensor | None = None
        self.dest_prior: dict | None = None  # pretrain="markov": the released tables
        self.round = 0
        self.history: list[dict] = []
        self.stopped: str | None = None
        self.ppo = PPOSettings.of(cfg)

    # --- checkpoint state: shared (identical on every rank) and this rank's shard -----------
    def shared_state(self) -> dict:
        return {"config": self.cfg.to_dict(), "blocks": self.blocks, "round": self.round,
                "history": self.history, "policy": self.policy.state_dict(),
                "value": self.value.state_dict(), "ppo_opt": self.ppo_opt.state_dict(),
                "accountant": self.accountant.state_dict(), "start_probs": self.start_probs,
                "generators": {k: g.get_state() for k, g in self.gens.items()},
                "numpy_rng": self.rng.bit_generator.state, "stopped": self.stopped,
                "pilot": None if self.pilot is None else self.pilot.state_dict(),
                "dest_prior": self.dest_prior}

    def shard_state(self) -> dict:
        return {"round": self.round, "rows": self.rows, "critics": self.critics.state_dict(),
                "critic_opt": self.critic_opt.state_dict()}

    def state_dict(self) -> dict:
        return {**self.shared_state(), **self.shard_state()}

    def load_state_dict(self, sd: dict) -> None:
        self.load_shared(sd)
        self.load_shard(sd)

    def load_shared(self, sd: dict) -> None:
        # a field added after the checkpoint was written counts as its default there
        defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
        old = {**defaults, **dict(sd["config"])}
        now = self.cfg.to_dict()
        diff = [k for k in now if k != "rounds" and old.get(k) != now[k]]
        if sd.get("blocks", 1) != self.blocks:
            diff.append("blocks")
        if diff:
            raise ConfigError(f"cannot resume: config fields {diff} differ from the checkpoint's; "
                              "use a new checkpoint folder or the original config")
        self.round, self.history = sd["round"], list(sd["history"])
        self.policy.load_state_dict(sd["policy"])
        self.value.load_state_dict(sd["value"])
        self.ppo_opt.load_state_dict(sd["ppo_opt"])
        self.accountant = PrivacyAccountant.from_state_dict(sd["accountant"])
        self.start_probs = sd["start_probs"]
        for k, g in self.gens.items():
            g.set_state(sd["generators"][k])
        self.rng.bit_generator.state = sd["numpy_rng"]
        self.stopped = sd["stopped"]
        if self.pilot is not None and sd.get("pilot") is not None:
            self.pilot = HistoryPilot.from_state_dict(sd["pilot"])
        if sd.get("dest_prior") is not None:  # the Markov release is not made again
            self.use_dest_prior(sd["dest_prior"])

    def load_shard(self, sd: dict) -> None:
        if sd["round"] != self.round or not torch.equal(sd["rows"], self.rows):
            raise ConfigError("cannot resume: this rank's checkpoint holds other users or another "
                              f"round ({sd['round']} vs {self.round}); resume with the same "
                              "number of processes")
        self.critics.load_state_dict(sd["critics"])
        self.critic_opt.load_state_dict(sd["critic_opt"])

    # -----------------------------------------------------------------------------------------
    def _from_rank0(self, fn) -> Any:
        """Run `fn()` (a DP release using the noise stream) on rank 0 only and broadcast its
        result with the accountant and the noise stream's state; a refused release is re-raised
        on every rank."""
        payload = None
        if self.comm.rank == 0:
            try:
                payload = {"value": fn()}
            except BudgetExceededError as exc:
                payload = {"stop": str(exc)}
            payload.update(acct=self.accountant.state_dict(), noise=self.gens["noise"].get_state())
        payload = self.comm.broadcast_object(payload)
        if self.comm.rank != 0:
            self.accountant = PrivacyAccountant.from_state_dict(payload["acct"])
            self.gens["noise"].set_state(payload["noise"])
        if "stop" in payload:
            raise BudgetExceededError(payload["stop"])
        return payload["value"]

    def setup_start_histogram(self) -> None:
        """Plan (refuse a budget that cannot pay one round), then the DP start distribution:
        central schemes release a coarse-to-fine hierarchy of the summed per-user start
        histograms (`models.starts.HierarchicalStarts`); local ones sum the users' own
        Laplace-perturbed reports over coarse cells (`LocalStarts`)."""
        cfg, coords = self.cfg, self.data.coords
        check_one_round(cfg, self.n_total, coords)
        if cfg.privacy_model == "local":
            cells = kd_levels(coords, (cfg.ldp_start_depth,))[0]
            mech = LocalStarts(cfg.start_hist_epsilon, cfg.start_tau)
            self.accountant.spend(mech.event())  # same ledger on every rank
            table = laplace((self.n_total, int(cells.max()) + 1), self.gens["noise"])
            reports = mech.reports(self.data.days_per_user, cells, table[self.rows])
            total = self.comm.all_reduce_sum(reports.sum(0))  # only perturbed reports summed
            self.start_probs = mech.estimate(total, self.n_total, cells)
            return
        levels = kd_levels(coords)
        mass = self.comm.all_reduce_sum(start_mass(self.data.days_per_user, self.env.n_locations))
        mech = HierarchicalStarts(cfg.start_hist_epsilon, len(levels), cfg.start_tau)
        self.start_probs = self._from_rank0(lambda: mech.release(
            mass, levels, gen=self.gens["noise"], spend=self.accountant.spend))

    def use_dest_prior(self, prior: dict) -> None:
        """Rebuild the environment with the released destination tables (post-processing)."""
        self.dest_prior = {k: np.asarray(v) for k, v in prior.items()}
        self.env = env_of(self.data.coords, self.cfg, self.dest_prior, self.device)

    def setup_markov(self) -> None:
        """pretrain="markov" (models/pretrain.py): plan (the Markov release and one round must
        fit the target), sum this rank's users' normalised Markov statistics, all-reduce them,
        release once on rank 0 (charged to this run's accountant) and broadcast the model;
        then its start distribution and destination tables are the run's, and the policy is
        behaviour-cloned on days sampled from it."""
        cfg, coords = self.cfg, self.data.coords
        check_one_round(cfg, self.n_total, coords)
        cell_of = move_cells(coords, cfg.markov_cell_depth)
        part = user_stats(self.data.days_per_user, cell_of, len(coords))
        total = Stats(*(self.comm.all_reduce_sum(torch.as_tensor(getattr(part, f.name)))
                        .cpu().numpy() for f in dataclasses.fields(Stats)))

        def release() -> MarkovModel:
            seed = int(torch.randint(2**62, (1,), generator=self.gens["noise"]))
            return release_markov(total, coords, cell_of, markov_epsilon(cfg), cfg.delta, seed,
                                  settings=cfg.markov, accountant=cfg.accountant,
                                  spend=self.accountant.spend)

        model = self._from_rank0(release)
        self.start_probs = torch.as_tensor(model.start_probs, dtype=torch.float64)
        if self.policy.residual:  # the release is the policy's parametrisation: no cloning
            self.policy.use_release(model, coords)
            return
        self.use_dest_prior(dest_prior(model, cfg.markov_dest_weight).to_dict())
        self.clone_markov(model)

    def clone_markov(self, model: MarkovModel) -> None:
        """Behaviour cloning on `bc_days` days sampled from the released model, on rank 0 (its
        seeds drawn from the `init` stream on every rank); the weights are broadcast."""
        cfg = self.cfg
        seeds = _seeds(self.gens["init"], 2)
        if cfg.bc_epochs == 0:
            return
        state = None
        if self.comm.rank == 0:
            days = model.sample(cfg.bc_days, np.random.default_rng(seeds[0]))
            losses = behaviour_clone(self.policy, self.env, days, cfg.bc_epochs,
                                     cfg.ppo_minibatch, cfg.policy_lr, _gen(seeds[1]))
            log.info("behaviour cloning on %d Markov days: loss %.4f -> %.4f", len(days),
                     losses[0], losses[-1])
            state = to_cpu(self.policy.state_dict())
        state = self.comm.broadcast_object(state)
        if self.comm.rank != 0:
            self.policy.load_state_dict(state)

    def my_blocks(self) -> range:
        per = self.blocks // self.comm.world
        return range(self.comm.rank * per, (self.comm.rank + 1) * per)

    def generate(self, gen: torch.Generator) -> tuple[Rollout, torch.Tensor]:
        """Roll out the current policy: block seeds and starts drawn from `gen` (the same on
        every rank), this rank's blocks rolled out, the pairs' features all-gathered in block
        order. Returns (this rank's Rollout, all generated features (E * (T - 1), F))."""
        cfg = self.cfg
        roll_seeds = _seeds(gen, self.blocks)
        starts = torch.multinomial(self.start_probs.float(), cfg.episodes_per_round,
                                   replacement=True, generator=gen)
        e_b = cfg.episodes_per_round // self.blocks
        ro = cat_rollouts([rollout(self.policy, self.value, self.env,
                                   starts[b * e_b:(b + 1) * e_b], _gen(roll_seeds[b]))
                           for b in self.my_blocks()])
        return ro, self.comm.all_gather_cat(ro.traj.flat("features"))

    def pretrain_critics(self) -> None:
        """`critic_pretrain_steps` steps of EVERY user's critic (this rank's users) before the
        first release: one batch of rollouts of the initial policy from the released start
        distribution (public: a function of the seed and a DP release only), then the usual
        batched steps against each user's own real pairs. Releases nothing and spends no
        epsilon (models/PROOF.md section 1): a user's critic stays a function of its own data
        and public inputs. Its random draws come from a stream of their own (seeded from the
        `init` stream), so the rounds' streams are those of a run without pretraining."""
        cfg = self.cfg
        if cfg.critic_pretrain_steps == 0:
            return
        gen = _gen(int(torch.randint(2**62, (1,), generator=self.gens["init"])))
        _, feats = self.generate(gen)
        lu = torch.arange(self.rows.shape[0])
        step = self.critic_step()
        for _ in range(cfg.critic_pretrain_steps):
            step.rows(feats, lu, self.rows, gen)

    def critic_step(self) -> CriticStep:
        """The rank's critic step, built from the critics and optimiser it holds now (a
        resumed run loads new ones)."""
        cfg = self.cfg
        return CriticStep(self.critics, self.critic_opt, self.real, self.counts, self.n_total,
                          cfg.critic_batch, cfg.critic_kind, cfg.lambda_gp)

    def setup(self) -> None:
        """What a fresh (not resumed) run does before round 1: plan and release the start
        distribution (or, under pretrain="markov", the Markov release and behaviour cloning),
        then pretrain the critics (`critic_pretrain_steps`)."""
        if self.cfg.pretrain == "markov":
            self.setup_markov()
        else:
            self.setup_start_histogram()
        self.pretrain_critics()

    def one_round(self) -> dict:
        """One round: draw the participants, roll out the policy, step their critics, release
        the rewards (DP), update the policy by PPO; returns the round's record. The random
        streams and collectives are used in this order on every rank."""
        cfg = self.cfg
        t0 = time.perf_counter()
        users = participants(self.n_total, cfg.participation, self.rng, cfg.sampling)
        mine = torch.isin(self.rows, users)
        lu, gu = mine.nonzero().squeeze(1), self.rows[mine]  # local and global indices
        ppo_seeds = _seeds(self.gens["ppo"], self.blocks)
        ro, feats = self.generate(self.gens["rollout"])
        t1 = time.perf_counter()
        closs, real_sum = self._step_critics(feats, lu, gu)
        t2 = time.perf_counter()
        rel = self._release_rewards(feats, lu, gu)
        t3 = time.perf_counter()
        rewards = rel.rewards.float().view(cfg.episodes_per_round, -1).to(self.device)
        stats = self._update_policy(ro, rewards, ppo_seeds)
        t4 = time.perf_counter()
        trusted = self._trusted(users, closs, real_sum, rel)
        return {**self._record(users, ro, rewards, stats, rel),
                "seconds": {"rollout": t1 - t0, "critics": t2 - t1, "release": t3 - t2,
                            "ppo": t4 - t3},
                "trusted": trusted}

    def result(self) -> FitResult:
        return FitResult(self.cfg, {k: v.detach().cpu().clone()
                                    for k, v in self.policy.state_dict().items()},
                         self.env.n_locations, self.start_probs, self.accountant.summary(),
                         self.accountant.state_dict(), self.history, self.round, self.stopped,
                         critic_shard(self)["critics"], list(self.data.user_ids),
                         self.dest_prior)


def train_loop(run: _Run, last: int, save=None, on_round=None,
               round_log_level: int = logging.INFO) -> None:
    """Rounds until `last` or a refused release; `save()` after every checkpoint_every rounds,
    at the last round and when stopped; `on_round(run)` before each round (fault hooks);
    `round_log_level`: the level of the per-round line (DEBUG for LiRA's shadow models)."""
    cfg = run.cfg
    while run.round < last and run.stopped is None:
        if on_round is not None:
            on_round(run)
        try:
            rec = run.one_round()
        except BudgetExceededError as exc:
            run.stopped = str(exc)
            # a shadow's stop repeats its target's (same recipe): DEBUG with its rounds
            log.log(logging.WARNING if round_log_level >= logging.INFO else logging.DEBUG,
                    "round %d: stopping, %s", run.round, exc)
            break
        run.history.append(rec)
        run.round += 1
        # public figures only (the "trusted" part of the record is never logged)
        log.log(round_log_level,
                "round %d/%d released reward %.4f policy %.4f epsilon %.4g (%.2fs)", run.round,
                cfg.rounds, rec["reward_mean"], rec["policy_loss"], rec["epsilon"],
                sum(rec["seconds"].values()))
        if save and (run.round % cfg.checkpoint_every == 0 or run.round == last):
            save()
    if save and run.stopped:
        save()
    if run.round == 0 and run.stopped:
        raise BudgetExceededError(f"no round was trained: {run.stopped}")


def fit(config: TrainConfig, data: TrainData, *, checkpoint: Checkpointing | None = None,
        stop_after: int | None = None, blocks: int = 1,
        device: torch.device | str | None = None,
        round_log_level: int = logging.INFO) -> FitResult:
    """Train PateGAIL / PateGAIL++ on `data` in this process; `stop_after` ends early after that
    many rounds in total (for tests of resume); `checkpoint`: where checkpoints are saved, and
    whether to continue from the one there; `blocks` = rollout blocks (use the W-process run's
    value to reproduce it here); `device`: where the model computes (default CPU; see the
    module doc), the result and checkpoints hold CPU tensors either way."""
    run = _Run(config, data, blocks=blocks, device=device)
    checkpoint_dir = checkpoint.folder if checkpoint else None
    ckpt = load_checkpoint(checkpoint_dir) if (checkpoint and checkpoint.resume) else None
    if ckpt is not None:
        run.load_state_dict(ckpt)
        log.info("resumed at round %d, epsilon %.4g", run.round, run.accountant.epsilon())
    else:
        run.setup()
    last = config.rounds if stop_after is None else min(config.rounds, stop_after)
    save = ((lambda: save_checkpoint(to_cpu(run.state_dict()), checkpoint_dir))
            if checkpoint_dir else None)
    train_loop(run, last, save, round_log_level=round_log_level)
    return run.result()
