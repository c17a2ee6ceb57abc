"""Single-process training loop: `fit(config, data) -> FitResult`.

One round (the Spark job runs the same steps per rank, with collectives at the marked seams):
  1. participation: a random fraction of users takes part (numpy Generator);
  2. roll out E episodes from DP start locations with the current policy   [replicated policy]
  3. every participating critic takes `critic_steps` batched steps           [rank-local]
  4. local_moments(critics, features, users) -> Moments(sum, sumsq, count)  [all-reduce here]
  5. scheme.release(moments, gen=noise_gen, spend=accountant.spend)         [rank 0 noise, bcast]
  6. PPO update on the released rewards                                     [DDP]
Budget is checked inside step 5 before each noise draw; a refused release ends training with
`stopped_reason` set and the policy of the last completed round.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from models.accounting import PrivacyAccountant
from models.aggregation import LdpReward, SensitivityAware, UniformLaplace
from models.checkpoint import load_checkpoint, save_checkpoint
from models.config import TrainConfig
from models.critics import BatchedAdam, BatchedCritics, critic_rewards, critic_step, local_moments
from models.data import TrainData
from models.env import MobilityEnv
from models.features import FEATURE_DIM, expert_features_per_user
from models.policy import PolicyNet, ValueNet
from models.ppo import PPOSettings, ppo_update, rollout
from models.synthesis import dp_start_histogram
from udfs.errors import BudgetExceededError, ConfigError

log = logging.getLogger(__name__)

GENERATORS = ("init", "rollout", "critic", "noise", "ppo")


def make_scheme(cfg: TrainConfig):
    if cfg.scheme == "pategail":
        return UniformLaplace(cfg.noise, cfg.beta)
    if cfg.scheme == "pategail++":
        return SensitivityAware(cfg.noise, cfg.pilot_fraction, cfg.delta_prime, cfg.beta)
    return LdpReward(cfg.noise, cfg.scheme == "ldp++", cfg.pilot_fraction, cfg.delta_prime,
                     cfg.beta)


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


def participants(n_users: int, fraction: float, rng: np.random.Generator) -> torch.Tensor:
    if fraction >= 1:
        return torch.arange(n_users)
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

    def policy(self) -> PolicyNet:
        c = self.config
        net = PolicyNet(self.n_locations, c.loc_dim, c.slot_dim, c.policy_hidden)
        net.load_state_dict(self.policy_state)
        return net


class _Run:
    """All mutable training state; `state_dict` is exactly what a checkpoint holds."""

    def __init__(self, cfg: TrainConfig, data: TrainData):
        self.cfg, self.data = cfg, data
        self.env = MobilityEnv(data.coords, cfg.k_nearest, cfg.explore_exponent)
        self.real, self.counts = expert_features_per_user(self.env, data.days_per_user)
        self.gens, self.rng = make_generators(cfg.seed)
        n_loc = self.env.n_locations
        with torch.random.fork_rng(devices=[]):  # nn init uses the global RNG: fence it
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=self.gens["init"])))
            self.policy = PolicyNet(n_loc, cfg.loc_dim, cfg.slot_dim, cfg.policy_hidden)
            self.value = ValueNet(n_loc, cfg.loc_dim, cfg.slot_dim, cfg.policy_hidden)
        self.ppo_opt = torch.optim.Adam(
            list(self.policy.parameters()) + list(self.value.parameters()), lr=cfg.policy_lr)
        self.critics = BatchedCritics(data.n_users, FEATURE_DIM, cfg.critic_hidden,
                                      self.gens["init"], cfg.spectral_norm)
        self.critic_opt = BatchedAdam(list(self.critics.parameters()), lr=cfg.critic_lr)
        self.accountant = PrivacyAccountant(cfg.delta, cfg.target_epsilon, cfg.accountant)
        self.scheme = make_scheme(cfg)
        self.start_probs: torch.Tensor | None = None
        self.round = 0
        self.history: list[dict] = []
        self.stopped: str | None = None
        self.ppo = PPOSettings(cfg.clip, cfg.gamma, cfg.gae_lambda, cfg.ppo_epochs,
                               cfg.ppo_minibatch, cfg.entropy_coef, cfg.value_coef,
                               cfg.max_grad_norm)

    def state_dict(self) -> dict:
        return {"config": self.cfg.to_dict(), "round": self.round, "history": self.history,
                "policy": self.policy.state_dict(), "value": self.value.state_dict(),
                "ppo_opt": self.ppo_opt.state_dict(), "critics": self.critics.state_dict(),
                "critic_opt": self.critic_opt.state_dict(),
                "accountant": self.accountant.state_dict(), "start_probs": self.start_probs,
                "generators": {k: g.get_state() for k, g in self.gens.items()},
                "numpy_rng": self.rng.bit_generator.state, "stopped": self.stopped}

    def load_state_dict(self, sd: dict) -> None:
        old = dict(sd["config"])
        now = self.cfg.to_dict()
        diff = [k for k in now if k != "rounds" and old.get(k) != now[k]]
        if diff:
            raise ConfigError(f"cannot resume: config fields {diff} differ from the checkpoint's; "
                              "use a new checkpoint folder or the original config")
        self.round, self.history = sd["round"], list(sd["history"])
        self.policy.load_state_dict(sd["policy"])
        self.value.load_state_dict(sd["value"])
        self.ppo_opt.load_state_dict(sd["ppo_opt"])
        self.critics.load_state_dict(sd["critics"])
        self.critic_opt.load_state_dict(sd["critic_opt"])
        self.accountant = PrivacyAccountant.from_state_dict(sd["accountant"])
        self.start_probs = sd["start_probs"]
        for k, g in self.gens.items():
            g.set_state(sd["generators"][k])
        self.rng.bit_generator.state = sd["numpy_rng"]
        self.stopped = sd["stopped"]

    # -----------------------------------------------------------------------------------------
    def setup_start_histogram(self) -> None:
        self.start_probs = dp_start_histogram(
            self.data.days_per_user, self.env.n_locations, self.cfg.start_hist_epsilon,
            self.gens["noise"], self.accountant.spend)

    def one_round(self) -> dict:
        cfg, g = self.cfg, self.gens
        t0 = time.perf_counter()
        users = participants(self.data.n_users, cfg.participation, self.rng)
        starts = torch.multinomial(self.start_probs.float(), cfg.episodes_per_round,
                                   replacement=True, generator=g["rollout"])
        ro = rollout(self.policy, self.value, self.env, starts, g["rollout"])
        feats = ro.traj.flat("features")
        t1 = time.perf_counter()
        for _ in range(cfg.critic_steps):
            closs = critic_step(self.critics, self.critic_opt, self.real, self.counts, feats, users,
                                cfg.critic_batch, cfg.critic_kind, cfg.lambda_gp, g["critic"])
        t2 = time.perf_counter()
        if isinstance(self.scheme, LdpReward):
            rw = critic_rewards(self.critics, feats, users, cfg.score_chunk_elems)
            raw_mean = rw.double().mean(0)
            rel = self.scheme.release_local(rw, users, self.data.n_users, gen=g["noise"],
                                            spend=self.accountant.spend)
        else:
            mom = local_moments(self.critics, feats, users, cfg.score_chunk_elems)
            raw_mean = mom.sum / mom.count
            rel = self.scheme.release(mom, gen=g["noise"], spend=self.accountant.spend)
        t3 = time.perf_counter()
        rewards = rel.rewards.float().view(ro.logp.shape)
        stats = ppo_update(self.policy, self.value, self.ppo_opt, ro, rewards, self.env, self.ppo,
                           g["ppo"])
        t4 = time.perf_counter()
        return {"round": self.round, "participants": int(users.shape[0]),
                "reward_raw_mean": float(raw_mean.mean()), "reward_mean": float(rewards.mean()),
                "critic_loss": float(closs.mean()),
                "policy_loss": float(np.mean(stats["policy_loss"])),
                "value_loss": float(np.mean(stats["value_loss"])),
                "entropy": float(np.mean(stats["entropy"])),
                "clip_frac": float(np.mean(stats["clip_frac"])),
                "epsilon_batch": rel.epsilon_spent, "epsilon": self.accountant.epsilon(),
                "action_freq": torch.bincount(ro.traj.actions.reshape(-1), minlength=4)
                .div(ro.traj.actions.numel()).tolist(),
                "seconds": {"rollout": t1 - t0, "critics": t2 - t1, "release": t3 - t2,
                            "ppo": t4 - t3}}


def fit(config: TrainConfig, data: TrainData, *, checkpoint_dir: str | Path | None = None,
        resume: bool = False, stop_after: int | None = None) -> FitResult:
    """Train PateGAIL / PateGAIL++ on `data`; `stop_after` ends early after that many rounds
    in total (for tests of resume); `resume` continues from `checkpoint_dir/latest.pt`."""
    run = _Run(config, data)
    ckpt = load_checkpoint(checkpoint_dir) if (resume and checkpoint_dir) else None
    if ckpt is not None:
        run.load_state_dict(ckpt)
        log.info("resumed at round %d, epsilon %.4g", run.round, run.accountant.epsilon())
    else:
        try:
            run.setup_start_histogram()
        except BudgetExceededError as exc:
            raise BudgetExceededError(f"start histogram alone exceeds the budget: {exc}") from exc
    last = config.rounds if stop_after is None else min(config.rounds, stop_after)
    while run.round < last and run.stopped is None:
        try:
            rec = run.one_round()
        except BudgetExceededError as exc:
            run.stopped = str(exc)
            log.warning("round %d: stopping, %s", run.round, exc)
            break
        run.history.append(rec)
        run.round += 1
        log.info("round %d/%d reward %.4f (raw %.4f) critic %.4f policy %.4f epsilon %.4g (%.2fs)",
                 run.round, config.rounds, rec["reward_mean"], rec["reward_raw_mean"],
                 rec["critic_loss"], rec["policy_loss"], rec["epsilon"],
                 sum(rec["seconds"].values()))
        if checkpoint_dir and (run.round % config.checkpoint_every == 0 or run.round == last):
            save_checkpoint(run.state_dict(), checkpoint_dir)
    if checkpoint_dir and run.stopped:
        save_checkpoint(run.state_dict(), checkpoint_dir)
    return FitResult(config, {k: v.clone() for k, v in run.policy.state_dict().items()},
                     run.env.n_locations, run.start_probs, run.accountant.summary(),
                     run.accountant.state_dict(), run.history, run.round, run.stopped)
