"""The trained per-user critics as artefacts of a run: one file per rank, merged by user.

Why: under TorchDistributor every rank holds only its own users' critics (docs/architecture.md
section 6), yet the white-box membership attack and the critic LiRA (models/attacks) need the
critics of all users, and a reader must not need to know how the users were sharded. So each rank
writes `<run>/critics/rank<r>.pt` with its users' global indices (their rows in the user-id order
that every rank shares), their user ids and the critic weights (not the optimiser: that stays in
the resumable checkpoint); `load_user_critics` concatenates the shards, puts them in global order
and checks that every user 0..U-1 is there exactly once and that all shards come from the same
world and round. The merged critics of a W-rank run are the critics a one-process run of the same
seed and blocks holds (tests/models/test_critic_store.py).

Privacy: the critics are trained on raw local days without noise, and the files name raw user
ids; they live in the run's 0700 folder in the trusted zone and are never published.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from models.checkpoint import load_checkpoint, save_checkpoint
from models.critics import BatchedCritics
from models.features import FEATURE_DIM
from udfs.errors import InputDataError

FOLDER = "critics"
FORMAT = 1


@dataclass(frozen=True)
class UserCritics:
    """Critic weights of a set of users (`state`: BatchedCritics' state dict, leading dimension =
    user, in the order of `user_ids`)."""

    state: dict
    user_ids: list
    hidden: int
    spectral_norm: bool

    def __post_init__(self) -> None:
        sizes = {int(v.shape[0]) for v in self.state.values()}
        if sizes != {len(self.user_ids)}:
            raise InputDataError(f"critic tensors have {sorted(sizes)} users but "
                                 f"{len(self.user_ids)} user ids are named")

    @property
    def n_users(self) -> int:
        return len(self.user_ids)

    def module(self) -> BatchedCritics:
        """The critics as a BatchedCritics in eval mode (what the attacks call)."""
        critics = BatchedCritics(self.n_users, FEATURE_DIM, self.hidden,
                                 torch.Generator().manual_seed(0), self.spectral_norm)
        critics.load_state_dict(self.state)
        return critics.eval()

    def select(self, index) -> UserCritics:
        """The critics of users `index` (positions in this set), in that order."""
        idx = torch.as_tensor(index, dtype=torch.long)
        return UserCritics({k: v[idx].clone() for k, v in self.state.items()},
                           [self.user_ids[int(i)] for i in idx], self.hidden, self.spectral_norm)


def critic_shard(run, rank: int = 0, world: int = 1) -> dict:
    """What one rank saves: its users' critics with their global indices and ids. `run` is a
    models.train._Run (critics, rows, n_total, cfg, data.user_ids, round)."""
    return {"format": FORMAT, "rank": rank, "world": world, "round": int(run.round),
            "n_users_total": int(run.n_total),
            "rows": run.rows.detach().to("cpu", torch.long, copy=True),
            "user_ids": list(run.data.user_ids), "hidden": int(run.cfg.critic_hidden),
            "spectral_norm": bool(run.cfg.spectral_norm),
            "critics": {k: v.detach().to("cpu", copy=True)
                        for k, v in run.critics.state_dict().items()}}


def save_critic_shard(run, out_dir: str | Path, rank: int = 0, world: int = 1) -> Path:
    """Write this rank's shard atomically to `out_dir/critics/rank<r>.pt`; returns the path."""
    return save_checkpoint(critic_shard(run, rank, world), Path(out_dir) / FOLDER,
                           f"rank{rank}.pt")


def merge_critic_shards(shards: list[dict]) -> UserCritics:
    """All users' critics in global order from the ranks' shards (any order); raises
    InputDataError naming what is missing or inconsistent."""
    if not shards:
        raise InputDataError("no critic shards to merge")
    first = shards[0]
    keys = ("world", "round", "n_users_total", "hidden", "spectral_norm")
    for s in shards:
        if s.get("format") != FORMAT:
            raise InputDataError(f"critic shard format {s.get('format')} is not {FORMAT}")
        odd = [k for k in keys if s[k] != first[k]]
        if odd:
            raise InputDataError(f"critic shards disagree on {odd}: they come from different "
                                 "runs; retrain or remove the stale files")
    ranks = sorted(s["rank"] for s in shards)
    if ranks != list(range(first["world"])):
        raise InputDataError(f"critic shards of ranks {ranks} found, the run had "
                             f"{first['world']} rank(s)")
    rows = torch.cat([s["rows"] for s in shards])
    n = first["n_users_total"]
    if not torch.equal(torch.sort(rows).values, torch.arange(n)):
        raise InputDataError(f"critic shards cover {rows.numel()} rows, not each of the {n} "
                             "users exactly once")
    order = torch.argsort(rows)
    ids = [u for s in shards for u in s["user_ids"]]
    state = {k: torch.cat([s["critics"][k] for s in shards])[order]
             for k in first["critics"]}
    return UserCritics(state, [ids[int(i)] for i in order], first["hidden"],
                       first["spectral_norm"])


def load_user_critics(run_dir: str | Path) -> UserCritics:
    """The merged critics of the run whose artefacts are in `run_dir` (`critics/rank*.pt`)."""
    folder = Path(run_dir) / FOLDER
    files = sorted(folder.glob("rank*.pt"))
    if not files:
        raise InputDataError(f"no critics in {folder}: the run was trained before critics were "
                             "saved as artefacts; retrain it to attack its critics")
    return merge_critic_shards([load_checkpoint(folder, f.name) for f in files])
