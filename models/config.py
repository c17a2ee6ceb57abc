"""Training configuration (a frozen dataclass validated on construction).

The Spark job builds it from the pydantic/YAML config; a wrong value fails here with a message
naming the field (ConfigError).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from udfs.errors import ConfigError


@dataclass(frozen=True)
class Scheme:
    """A reward scheme's traits, which the trainer, the accountant and the reports ask of it
    (the scheme's builders are `models.aggregation.registry`'s, keyed by the same names).
    `local`: every user randomises its own reports (no trusted aggregator);
    `sensitivity_aware`: the noise is scaled per pair from a pilot estimate (PateGAIL++'s);
    `paper_critic`: the critic its paper trains per user."""

    name: str
    local: bool
    sensitivity_aware: bool
    paper_critic: str


# the critic each paper trains: PateGAIL (NeurIPS 2023) a cross-entropy discriminator per user,
# PateGAIL++ a WGAN-GP critic per user; the LDP variants follow their central counterparts
SCHEME_TRAITS = {s.name: s for s in (
    Scheme("pategail", local=False, sensitivity_aware=False, paper_critic="bce"),
    Scheme("pategail++", local=False, sensitivity_aware=True, paper_critic="wgan"),
    Scheme("ldp", local=True, sensitivity_aware=False, paper_critic="bce"),
    Scheme("ldp++", local=True, sensitivity_aware=True, paper_critic="wgan"),
)}
SCHEMES = tuple(SCHEME_TRAITS)
LOCAL_SCHEMES = tuple(n for n, s in SCHEME_TRAITS.items() if s.local)
PAPER_CRITIC = {n: s.paper_critic for n, s in SCHEME_TRAITS.items()}
PILOTS = ("history", "laplace")
DEFAULT_PILOT = "history"  # the free pilot: the schemes' default as well as the config's
MECHANISMS = ("laplace", "gaussian")
SAMPLINGS = ("fixed", "poisson")
DESTINATIONS = ("public", "learned", "residual")
PRETRAINS = ("none", "markov")
SHARE_UNITS = ("epsilon", "rho")


@dataclass(frozen=True)
class MarkovSettings:
    """The DP Markov release's utility choices (`models.markov`): the noise ("gaussian",
    composed under the accountant; "laplace", pure epsilon), the k-d depth of the public move
    cells, the soft threshold of the hierarchies and transition rows (in noise sds) and the
    pooling of the action table over slots t - smooth .. t + smooth. The guarantee holds for
    any of them."""

    mechanism: str = "gaussian"
    cell_depth: int = 5
    tau: float = 2.0
    smooth: int = 1


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    # the pipeline's default too (jobs.config's `train.rounds` takes it from here, its one
    # home); the benches and tests set their own
    rounds: int = 20
    scheme: str = "pategail++"  # pategail | pategail++ | ldp | ldp++ (LDP without/with weights)
    # per released pair of the matched uniform scheme: the Laplace scale lambda (mechanism
    # "laplace", noise sd sqrt(2) lambda) or the Gaussian standard deviation sigma ("gaussian")
    noise: float = 0.1
    # the reward release: "laplace" (B composed Laplace releases a batch, pure epsilon each) or
    # "gaussian" (one Gaussian mechanism on the (B,) mean vector, L2 sensitivity sqrt(B)/N;
    # central schemes, history pilot; models/aggregation/uniform.py UniformGaussian)
    mechanism: str = "laplace"
    # sensitivity-aware pilot: "history" = the previous rounds' released rewards of pairs with the
    # same public key (slot, action, at home), free post-processing; "laplace" = a fresh noisy
    # release costing pilot_fraction of the batch budget (the paper's)
    pilot: str = DEFAULT_PILOT
    pilot_decay: float = 0.5  # weight of the older rounds in the history pilot
    pilot_fraction: float = 0.1
    delta_prime: float = 0.1
    beta: float = 0.0  # dynamics compensation weight; 0 disables (no variance release)
    # users per round: "fixed" = round(participation * N) users drawn without replacement, every
    # round charged in full (no amplification claimed); "poisson" = each user independently with
    # probability q = participation, mean released as sum / (q N), accounted with amplification
    # (PoissonSampledDpEvent; add/remove-one neighbouring; gaussian, beta = 0 only)
    participation: float = 1.0
    sampling: str = "fixed"
    # environment
    k_nearest: int = 200
    explore_exponent: float = 0.6
    episodes_per_round: int = 64
    # where explore and return moves go: "public" = the environment's fixed public
    # distributions (rank k^-alpha among the K nearest; visit counts); "learned" = the policy's
    # destination head tilts them by distance-band features, trained by the same PPO on the
    # released rewards (models/policy.py; nothing private enters the policy)
    # "residual" (needs pretrain="markov"): the policy is the DP Markov release's action and
    # move tables plus a zero-initialised residual over every location (models/residual.py);
    # its rounds are held near the release by kl_coef
    destination: str = "public"
    # residual policy: whether its rounds train the action residual r_theta too. False keeps
    # pi(a | s) exactly the release's (its head frozen at zero) and trains the destination
    # residual d_theta alone: the rounds then cannot move the statistics of the day's shape
    # (stay lengths, motifs, returns home), only where the moves go
    residual_actions: bool = True
    # critics
    critic_kind: str | None = None  # bce | wgan; None: the scheme's paper (PAPER_CRITIC)
    lambda_gp: float = 10.0
    spectral_norm: bool = False
    critic_hidden: int = 32
    critic_lr: float = 1e-3
    critic_steps: int = 2  # critic steps a round, before the round's rewards are scored
    critic_batch: int = 64
    # steps each user's critic takes before the first release, against the public rollouts of
    # the initial policy and its own real pairs (local data only, nothing released: costs no
    # epsilon, models/PROOF.md section 1); a resumed run does not pretrain again
    critic_pretrain_steps: int = 0
    # real pairs per user that the trusted critic_gap diagnostic scores each round: a fixed
    # uniform sample drawn once (models.critics.real_pair_sample); 0 = all of them. A
    # diagnostic only: no release and no trained weight depends on it
    gap_pairs: int = 256
    score_chunk_elems: int = 1 << 24
    # policy / PPO
    loc_dim: int = 16
    slot_dim: int = 8
    policy_hidden: int = 64
    policy_lr: float = 3e-3
    ppo_epochs: int = 4
    ppo_minibatch: int = 512
    clip: float = 0.2
    gamma: float = 0.99
    gae_lambda: float = 0.95
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    # weight of the KL(pi || P_release) penalty in each PPO update of a residual policy (0: off):
    # it keeps the rounds refining the release instead of undoing it. Chosen by
    # bench/reproduce_synthesis.py on Foursquare NYC at epsilon 4 (3 seeds, 0.1 / 1 / 10): the
    # released rewards are noisy enough that every statistic improved with a tighter hold
    kl_coef: float = 10.0
    # privacy
    delta: float = 1e-5
    target_epsilon: float | None = None
    accountant: str = "rdp"  # rdp | pld
    start_hist_epsilon: float = 1.0
    start_tau: float = 2.0  # soft threshold of the DP start hierarchy, in noise scales
    ldp_start_depth: int = 4  # ldp / ldp++: k-d depth of the cells users report starts in
    # private pre-training (models/pretrain.py): "markov" = release the DP Markov model
    # (models.markov) on the training users with markov_share of target_epsilon, take its start
    # distribution and destination tables, behaviour-clone the policy on bc_days days sampled
    # from it for bc_epochs passes (post-processing), then spend the rest on the rounds; the
    # Markov release and the rounds compose in one accountant (models/PROOF.md section 10)
    pretrain: str = "none"
    markov_share: float = 0.5
    # the unit markov_share divides: "epsilon" = the release is calibrated alone to
    # markov_share * target_epsilon; "rho" = the release gets markov_share of the privacy loss
    # in the accountant's natural unit for Gaussians, 1/sigma^2 (additive under RDP / zCDP):
    # with S the one Gaussian multiplier that spends target_epsilon, the release's multiplier is
    # S / sqrt(markov_share) (0.9: about 5% more noise than S), the rounds get the rest
    # (models/pretrain.py; Gaussian releases only)
    markov_share_unit: str = "epsilon"
    bc_epochs: int = 1
    bc_days: int = 2000
    # the Markov release's own settings (utility choices, models.markov.fit_markov)
    markov_mechanism: str = MarkovSettings.mechanism
    markov_cell_depth: int = MarkovSettings.cell_depth
    markov_tau: float = MarkovSettings.tau
    markov_smooth: int = MarkovSettings.smooth
    # how far the release's destination tables tilt the explore draws (models.env.DestPrior):
    # 0 = the public distribution alone, 1 = the release's alone among the K nearest
    markov_dest_weight: float = 0.5
    # bookkeeping
    checkpoint_every: int = 1

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"train config field {name!r}={getattr(self, name)!r}: {why}")

        if self.scheme not in SCHEMES:
            raise bad("scheme", f"must be one of {SCHEMES}")
        if self.critic_kind is None:
            object.__setattr__(self, "critic_kind", PAPER_CRITIC[self.scheme])
        if self.pilot not in PILOTS:
            raise bad("pilot", f"must be one of {PILOTS}")
        if not 0 <= self.pilot_decay < 1:
            raise bad("pilot_decay", "must lie in [0, 1)")
        if self.start_tau < 0 or self.ldp_start_depth < 0:
            raise bad("start_tau" if self.start_tau < 0 else "ldp_start_depth", "must be >= 0")
        if self.critic_kind not in ("wgan", "bce"):
            raise bad("critic_kind", "must be 'wgan' or 'bce'")
        if self.accountant not in ("rdp", "pld"):
            raise bad("accountant", "must be 'rdp' or 'pld'")
        if self.mechanism not in MECHANISMS:
            raise bad("mechanism", f"must be one of {MECHANISMS}")
        if self.destination not in DESTINATIONS:
            raise bad("destination", f"must be one of {DESTINATIONS}")
        if self.sampling not in SAMPLINGS:
            raise bad("sampling", f"must be one of {SAMPLINGS}")
        if self.mechanism == "gaussian" and self.scheme in LOCAL_SCHEMES:
            raise bad("mechanism", f"the local schemes {LOCAL_SCHEMES} release Laplace noise "
                      "only; use mechanism='laplace' or a central scheme")
        if self.mechanism == "gaussian" and self.scheme == "pategail++" and self.pilot != "history":
            raise bad("pilot", "the Gaussian sensitivity-aware release takes the free history "
                      "pilot only; set pilot='history' or mechanism='laplace'")
        if self.sampling == "poisson":
            if self.scheme in LOCAL_SCHEMES:
                raise bad("sampling", "Poisson amplification is offered for the central schemes "
                          "only; use sampling='fixed'")
            if self.mechanism != "gaussian":
                raise bad("sampling", "a Laplace round is B composed Laplace releases, which "
                          "neither dp_accounting accountant amplifies jointly (PLD: one Laplace "
                          "event, RDP: Gaussians); set mechanism='gaussian' or sampling='fixed'")
            if self.beta > 0:
                raise bad("sampling", "the variance release (beta > 0) has no bounded "
                          "sensitivity with a public normaliser; set beta=0 or sampling='fixed'")
        self._check_ranges(bad)
        self._check_pretrain(bad)

    def _check_ranges(self, bad) -> None:
        for name in ("noise", "pilot_fraction", "delta_prime", "critic_lr", "policy_lr", "clip",
                     "start_hist_epsilon"):
            if not 0 < getattr(self, name) < math.inf:
                raise bad(name, "must be finite and > 0")
        for name in ("rounds", "episodes_per_round", "k_nearest", "critic_hidden", "critic_steps",
                     "critic_batch", "ppo_epochs", "ppo_minibatch", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        if not 0 < self.participation <= 1:
            raise bad("participation", "must lie in (0, 1]")
        if not 0 < self.delta < 1:
            raise bad("delta", "must lie in (0, 1)")
        for name in ("critic_pretrain_steps", "gap_pairs"):
            if getattr(self, name) < 0:
                raise bad(name, "must be >= 0")
        if self.beta < 0 or self.lambda_gp < 0:
            raise bad("beta" if self.beta < 0 else "lambda_gp", "must be >= 0")
        if self.target_epsilon is not None and not 0 < self.target_epsilon < math.inf:
            raise bad("target_epsilon", "must be finite and > 0, or None")

    def _check_pretrain(self, bad) -> None:
        if self.pretrain not in PRETRAINS:
            raise bad("pretrain", f"must be one of {PRETRAINS}")
        if not 0 < self.markov_share < 1:
            raise bad("markov_share", "must lie in (0, 1): the fraction of target_epsilon the "
                      "Markov release takes, the rest paying the rounds")
        if self.markov_mechanism not in MECHANISMS:
            raise bad("markov_mechanism", f"must be one of {MECHANISMS}")
        if self.markov_share_unit not in SHARE_UNITS:
            raise bad("markov_share_unit", f"must be one of {SHARE_UNITS}")
        if self.markov_share_unit == "rho" and self.markov_mechanism != "gaussian":
            raise bad("markov_share_unit", "a share of rho (1/sigma^2) is a share of Gaussian "
                      "noise: set markov_mechanism='gaussian' or markov_share_unit='epsilon'")
        if self.bc_epochs < 0 or self.bc_days < 1 or self.markov_smooth < 0:
            name = ("bc_epochs" if self.bc_epochs < 0 else "bc_days" if self.bc_days < 1
                    else "markov_smooth")
            raise bad(name, "must be >= 0" if name != "bc_days" else "must be >= 1")
        if not 1 <= self.markov_cell_depth <= 16 or not 0 <= self.markov_tau < math.inf:
            name = "markov_tau" if 1 <= self.markov_cell_depth <= 16 else "markov_cell_depth"
            raise bad(name, "must lie in [1, 16]" if name == "markov_cell_depth"
                      else "must be finite and >= 0")
        if not 0 <= self.markov_dest_weight <= 1:
            raise bad("markov_dest_weight", "must lie in [0, 1]")
        if self.kl_coef < 0 or not math.isfinite(self.kl_coef):
            raise bad("kl_coef", "must be finite and >= 0")
        if not self.residual_actions and self.destination != "residual":
            raise bad("residual_actions", "false only applies to destination \"residual\" (the "
                      "action residual of the release's policy)")
        if self.destination == "residual" and self.pretrain != "markov":
            raise bad("destination", "the residual policy is parametrised on the DP Markov "
                      "release: set pretrain='markov'")
        if self.pretrain == "markov":
            if self.privacy_model == "local":
                raise bad("pretrain", "the Markov release is central (a trusted aggregator sums "
                          "the users' statistics); the local schemes cannot pre-train on it: set "
                          "pretrain='none' or a central scheme")
            if self.target_epsilon is None:
                raise bad("pretrain", "pretrain='markov' gives the Markov release markov_share "
                          "of target_epsilon: set target_epsilon")

    @property
    def markov(self) -> MarkovSettings:
        """The settings of the Markov release private pre-training starts from."""
        return MarkovSettings(self.markov_mechanism, self.markov_cell_depth, self.markov_tau,
                              self.markov_smooth)

    @property
    def privacy_model(self) -> str:
        """'local' (every user randomises its own reports) or 'central' (a trusted aggregator)."""
        return "local" if self.scheme in LOCAL_SCHEMES else "central"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown train config field(s) {unknown}; known: {sorted(known)}")
        return cls(**d)
