"""The synthesis methods' registry (jobs/methods): a method registered in one module (this one)
is a choice of train and the study, is what the train stage runs, what the study trains and
scores, what synthesize samples, what evaluate's membership attacks skip (no per-user critics)
and what the report names. No JVM: each stage's enumeration and dispatch is called directly."""

from __future__ import annotations

import argparse
import io
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from jobs import methods as registry
from jobs.config import load_config
from models.config import SCHEMES
from tests.models._toy import toy_data
from udfs.errors import ConfigError

NAME = "toy-uniform"
CALLS: list[tuple[str, str]] = []


@dataclass
class FittedToy:
    n_loc: int
    loc_ids: np.ndarray
    epsilon: float | None

    def sample(self, n_days: int, seed: int) -> np.ndarray:
        return np.random.default_rng([seed, 9]).integers(self.n_loc, size=(n_days, 48))

    def sample_partition(self, seed: int, p: int, first: int, count: int) -> pd.DataFrame:
        days = np.random.default_rng([seed, p]).integers(self.n_loc, size=(count, 48))
        return pd.DataFrame({"traj_no": np.arange(first, first + count, dtype=np.int64),
                             "slots": list(self.loc_ids[days].astype(np.int32))})


@dataclass(frozen=True)
class ToyMethod:
    """Uniform random days: a method needing no data (epsilon 0), its artefact an npz."""

    name: str = NAME
    label: str = "Toy uniform"
    learned: bool = False
    artefact: str = "toy.npz"
    trainer: str = f"{__name__}:toy_train"

    def fit(self, cfg, data, epsilon, seed):
        return FittedToy(len(data.coords), np.arange(len(data.coords)), 0.0)

    def load(self, blob):
        with np.load(io.BytesIO(blob)) as z:
            return FittedToy(int(z["n_loc"]), z["loc_ids"], None)

    def model_name(self, blob):
        return self.name

    def privacy_setting(self, figures):
        return f"toy: nothing read, {figures['epsilon']} epsilon"


def toy_train(spark, cfg, ctx):
    CALLS.append((cfg.train.method, ctx.run_id))
    return {"method": NAME, "epsilon": 0.0, "delta": 0.0}


@pytest.fixture
def toy():
    method = registry.register(ToyMethod())
    CALLS.clear()
    yield method
    registry.unregister(NAME)
    CALLS.clear()


def registry_default_conf():
    from pathlib import Path

    return Path(__file__).resolve().parents[2] / "conf" / "default.yaml"


def cfg_of(tmp_path, *overrides):
    return load_config(None, [f"storage.root={tmp_path}", *overrides])


def test_the_builtin_methods_are_the_markov_releases_and_the_core_schemes():
    assert registry.names() == ["markov", "markov2", *SCHEMES]
    assert registry.names(learned=True) == list(SCHEMES)
    assert [registry.get(n).label for n in registry.names()] == [
        "DP Markov", "DP Markov (adaptive 2nd order)", "PateGAIL", "PateGAIL++", "PateGAIL-LDP",
        "PateGAIL++-LDP"]
    assert registry.get("markov").artefact == "markov.npz"
    assert registry.get("markov2").artefact == "markov2.npz"
    assert {registry.get(n).artefact for n in SCHEMES} == {"policy.pt"}
    with pytest.raises(ValueError, match="already registered"):
        registry.register(ToyMethod(name="markov"))
    with pytest.raises(TypeError):
        registry.register(object())


def test_an_unregistered_method_is_refused_by_the_config(tmp_path):
    with pytest.raises(ConfigError, match=f"unknown synthesis method '{NAME}'.*markov"):
        cfg_of(tmp_path, f"train.method={NAME}")
    with pytest.raises(ConfigError, match=f"unknown synthesis method '{NAME}'"):
        cfg_of(tmp_path, f"study.synthesis_methods=[markov,{NAME}]")


def test_a_registered_method_is_trained_by_the_train_stage(tmp_path, toy):
    from jobs.train import stage

    with pytest.raises(ConfigError, match=f"choices: markov, .*, {NAME}"):
        cfg_of(tmp_path, "train.method=nope")
    cfg = cfg_of(tmp_path, f"train.method={NAME}")
    assert not cfg.train.learned
    figures = stage.run(None, cfg, argparse.Namespace(run_id="r1", args=argparse.Namespace()))
    assert CALLS == [(NAME, "r1")] and figures["method"] == NAME


def test_a_registered_method_is_trained_and_scored_by_the_study(tmp_path, toy, monkeypatch):
    from jobs.study import synthesis

    data = toy_data(n_users=4, days=3, seed=1)
    test = np.random.default_rng(0).integers(len(data.coords), size=(20, 48))
    monkeypatch.setattr(synthesis, "study_days", lambda spark, cfg: (data, test, data.coords))
    cfg = cfg_of(tmp_path, f"study.synthesis_methods=[{NAME}]", "synthesize.n_days=30")
    days, spent = synthesis.train_and_sample(NAME, cfg, data, 30, 5)
    assert days.shape == (30, 48) and spent == 0.0
    assert np.array_equal(days, ToyMethod().fit(cfg, data, 1.0, 5).sample(30, 5))
    rows, figures = synthesis.run_study(None, cfg, 5)
    assert figures["synthesis_methods"] == [NAME]
    scored = {r["metric"] for r in rows if r["method"] == synthesis.PREFIX + NAME}
    assert {"epsilon_spent", "dailyloc"} <= scored


def test_a_registered_method_is_sampled_by_synthesize(toy):
    buf = io.BytesIO()
    np.savez(buf, n_loc=7, loc_ids=np.arange(100, 107))
    method = registry.of_run({"method": NAME, "epsilon": 0.0})
    assert method is toy and method.model_name(buf.getvalue()) == NAME
    part = method.load(buf.getvalue()).sample_partition(3, 1, 10, 4)
    assert part["traj_no"].tolist() == [10, 11, 12, 13]
    slots = np.stack(part["slots"].to_numpy())
    assert slots.shape == (4, 48) and slots.min() >= 100 and slots.max() <= 106


def test_a_registered_method_is_named_by_the_report_and_skipped_by_the_attacks(tmp_path, toy):
    from jobs.evaluate.attacks import run_attacks
    from jobs.report.names import MODEL, SYNTHESIS_STUDY, canonical
    from jobs.report.stage import _training

    assert canonical(NAME) == ("Toy uniform", MODEL)
    assert canonical("synthesis-study:" + NAME) == ("Toy uniform", SYNTHESIS_STUDY)
    assert canonical("synthesis-study:markov") == ("DP Markov", SYNTHESIS_STUDY)
    figures = json.dumps({"method": NAME, "epsilon": 0.0})
    _, privacy = _training(pd.Series({"run_id": "r1", "figures": figures}))
    assert privacy[0]["setting"] == "toy: nothing read, 0.0 epsilon"
    cfg = cfg_of(tmp_path, "evaluate.attack_kinds=[whitebox]")
    rows, figures = run_attacks(None, cfg, [("r1", NAME, 0.0)])
    assert rows == [] and figures["membership_skipped"] == ["r1"]


def test_markov2_is_studied_and_named_but_not_published(tmp_path):
    """The adaptive second-order Markov model (jobs/methods/markov2.py): a choice of the study
    (and in its default list), refused by train.method, trained and sampled by the study at
    the target epsilon, named by the report; its artefact loads into synthesize's kernel."""
    from jobs.report.names import SYNTHESIS_STUDY, canonical
    from jobs.study import synthesis
    from models.markov2 import Markov2Model

    assert "markov2" in cfg_of(tmp_path).study.synthesis_methods
    assert "markov2" in load_config(registry_default_conf(), [f"storage.root={tmp_path}"]
                                    ).study.synthesis_methods
    with pytest.raises(ConfigError, match="markov2.*study and the benchmarks only.*markov"):
        cfg_of(tmp_path, "train.method=markov2")
    with pytest.raises(ConfigError, match="study and bench method"):
        registry.trainer_of(registry.get("markov2"))(None, cfg_of(tmp_path), None)
    cfg = cfg_of(tmp_path, "study.synthesis_methods=[markov2]", "train.markov2.threshold=0",
                 "train.markov2.second_share=0.3")
    data = toy_data(n_users=6, days=4, seed=2)
    days, spent = synthesis.train_and_sample("markov2", cfg, data, 40, 3)
    assert days.shape == (40, 48) and 0.98 * 10.0 <= spent <= 10.0
    model = registry.get("markov2").fit(cfg, data, 10.0, 3).model
    assert isinstance(model, Markov2Model) and model.accountant["second_share"] == 0.3
    assert canonical("synthesis-study:markov2") == ("DP Markov (adaptive 2nd order)",
                                                    SYNTHESIS_STUDY)
    buf = io.BytesIO()
    np.savez(buf, loc_ids=np.arange(500, 500 + len(data.coords)),
             **{name: getattr(model, name) for name in Markov2Model.TABLES})
    method = registry.get("markov2")
    part = method.load(buf.getvalue()).sample_partition(3, 1, 0, 5)
    assert method.model_name(buf.getvalue()) == "markov2"
    assert np.stack(part["slots"].to_numpy()).min() >= 500
