"""Config validation: every wrong key or value fails at start, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.config import load_config
from udfs.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("name", sorted(p.name for p in CONF_DIR.glob("*.yaml")))
def test_shipped_configs_validate(name: str) -> None:
    cfg = load_config(CONF_DIR / name)
    assert cfg.dataset


def test_override_sets_nested_values_and_spark_keys() -> None:
    cfg = load_config(
        CONF_DIR / "default.yaml",
        [
            "study.epsilons=[1, 2.5]",
            "spark.conf.spark.sql.shuffle.partitions=3",
            "datagen.users=7",
        ],
    )
    assert cfg.study.epsilons == [1.0, 2.5]
    assert cfg.spark.conf["spark.sql.shuffle.partitions"] == "3"
    assert cfg.datagen.users == 7


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["collect.epsilons=[3]"], r"collect\.epsilons: unknown key"),
        (["nonsense.key=1"], r"nonsense: unknown key"),
        (["collect.epsilon=0"], r"collect\.epsilon: .*finite and in \(0, 100\]"),
        (["collect.epsilon=-1"], r"collect\.epsilon"),
        (["collect.epsilon=.nan"], r"collect\.epsilon"),
        (["study.epsilons=[1e6]"], r"study\.epsilons"),
        (["study.mechanisms=[bogus]"], r"study\.mechanisms\.0"),
        (["datagen.users=-5"], r"datagen\.users: Input should be greater than or equal to 1"),
        (["ingest.max_len=0"], r"ingest\.max_len"),
        (["spark.conf.notspark=1"], r"spark\.conf: .*only spark\.\* settings"),
        (["dataset=bad name!"], r"dataset"),
        (["collect.epsilon"], r"expected key\.path=value"),
        # measured defects: accepted by the config, then an OverflowError inside ingest
        (["ingest.max_len=1e30"], r"ingest\.max_len"),
        (["ingest.gap_hours=1e300"], r"ingest\.gap_hours: Input should be less than or equal"),
        (["ingest.min_len=9"], r"min_len 9 is above max_len 8"),
        (["ingest.segment=week"], r"ingest\.segment"),
        (["collect.combiner=eq7"], r"collect\.combiner"),
    ],
)
def test_bad_values_name_the_key(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(CONF_DIR / "default.yaml", overrides)


def test_unknown_key_in_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("collect:\n  epsilonz: [1]\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*\n  collect\.epsilonz: unknown key"):
        load_config(bad)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("collect: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(listy)


GEOLIFE = Path(__file__).resolve().parents[3] / "shared" / "data" / "geolife_pategail"


@pytest.mark.skipif(not (GEOLIFE / "real.data").exists(), reason="needs ../shared/data")
@pytest.mark.parametrize("name", ["geolife.yaml", "geolife_compensated.yaml"])
def test_geolife_configs_plan_all_their_rounds_within_the_target(name: str) -> None:
    """Issue 15: conf/geolife.yaml trained 0 rounds and reported ok (its target could not pay
    one round). Each shipped Geolife config now plans every round under its target."""
    from jobs.train.stage import model_config
    from models.budget import planned_epsilon
    from models.data import load_geolife

    mc = model_config(load_config(CONF_DIR / name))
    data, _, _ = load_geolife(GEOLIFE)
    assert planned_epsilon(mc, data.n_users, data.coords, mc.rounds) <= mc.target_epsilon


def test_a_shipped_config_exercises_dynamics_compensation() -> None:
    """Issue 15: beta was implemented and accounted, but no config turned it on."""
    betas = {p.name: load_config(p).train.beta for p in CONF_DIR.glob("*.yaml")}
    assert betas["geolife_compensated.yaml"] > 0, betas


def test_a_section_given_twice_is_refused_not_merged_away(tmp_path: Path) -> None:
    """Measured defect: a second `ingest:` section silently dropped the first one's keys."""
    path = tmp_path / "twice.yaml"
    path.write_text("dataset: d\ningest:\n  max_len: 5\ncollect:\n  epsilon: 2\n"
                    "ingest:\n  gap_hours: 2\n")
    with pytest.raises(ConfigError, match=r"key 'ingest' appears twice \(lines 2 and 6\)"):
        load_config(path)


@pytest.mark.parametrize(("overrides", "expected"), [
    (["ingest.header=false"], r"header: false needs columns"),
    (["ingest.columns=[user,start,lat,lon]"], r"columns: is for files without a header"),
    (["ingest.sep=ab"], r"ingest\.sep: .*one separator character"),
    (["ingest.encoding=klingon"], r"unknown text encoding 'klingon'"),
])
def test_reader_layout_settings_are_checked(overrides, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(None, overrides)


def test_tab_is_spelled_tab():
    assert load_config(None, ["ingest.sep=tab"]).ingest.sep == "\t"


# --- storage.root never depends on the working directory (issue 20) --------------------------


def test_relative_root_resolves_against_the_config_folder_not_the_cwd(tmp_path, monkeypatch):
    conf = tmp_path / "proj" / "conf"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text("storage:\n  root: ../data\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_config(conf / "mine.yaml").storage.root == tmp_path / "proj" / "data"
    # a relative --set follows the same rule; an absolute one is kept
    assert load_config(conf / "mine.yaml", ["storage.root=run1"]).storage.root == conf / "run1"
    assert load_config("../proj/conf/mine.yaml").storage.root == tmp_path / "proj" / "data"
    assert load_config(conf / "mine.yaml", [f"storage.root={tmp_path}/x"]).storage.root == (
        tmp_path / "x")


def test_the_shipped_default_keeps_make_run_on_the_checkouts_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config(CONF_DIR / "default.yaml").storage.root == CONF_DIR.parent / "data"


def test_defaults_without_a_file_resolve_against_trajpriv_home(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAJPRIV_HOME", str(tmp_path / "home"))
    assert load_config(None).storage.root == tmp_path / "home" / "data"
    monkeypatch.setenv("TRAJPRIV_HOME", "relative/home")
    with pytest.raises(ConfigError, match="TRAJPRIV_HOME='relative/home' is a relative path"):
        load_config(None)
    monkeypatch.delenv("TRAJPRIV_HOME")
    assert load_config(None).storage.root == CONF_DIR.parent / "data"  # the checkout's conf/
