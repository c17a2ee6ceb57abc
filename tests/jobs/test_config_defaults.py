"""Each default has one home, the code: a shipped config sets only what differs from it, and says
why.

A YAML key at its default value is a second home for the default: when the code's default
changes, that config silently keeps the old value (conf/default.yaml once repeated 26 of its 41
keys, so `load_config(None)` and `make run` disagreed where nobody had decided they should).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from jobs.config import Config, load_config

CONF = Path(__file__).resolve().parents[2] / "conf"
SHIPPED = sorted(CONF.glob("*.yaml"))


def _is_section(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    field = model.model_fields.get(key)
    annotation = field.annotation if field is not None else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) \
        else None


def _leaf_keys(tree: dict, model: type[BaseModel] = Config, prefix: str = "") -> list[str]:
    """The dotted keys a YAML tree sets, down to the fields (a dict-valued field such as
    spark.conf is one key: its default is the whole dict)."""
    keys = []
    for key, value in tree.items():
        section = _is_section(model, key)
        if section is not None and isinstance(value, dict):
            keys += _leaf_keys(value, section, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def _value(cfg: Config, dotted: str):
    node = cfg.model_dump(mode="json")
    for part in dotted.split("."):
        node = node[part]
    return node


def _flat(node: dict, model: type[BaseModel] = Config, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in node.items():
        section = _is_section(model, key)
        if section is not None:
            out.update(_flat(value, section, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _key_rows(node: yaml.MappingNode, model: type[BaseModel] = Config,
              prefix: str = "") -> dict[str, int]:
    """{dotted key: its line (0-based)} of the keys a composed YAML file sets (as _leaf_keys)."""
    rows = {}
    for key_node, value_node in node.value:
        section = _is_section(model, key_node.value)
        if section is not None and isinstance(value_node, yaml.MappingNode):
            rows.update(_key_rows(value_node, section, f"{prefix}{key_node.value}."))
        else:
            rows[f"{prefix}{key_node.value}"] = key_node.start_mark.line
    return rows


def _has_reason(lines: list[str], row: int) -> bool:
    """A comment on the key's line, or one right above the run of sibling keys it ends (one
    reason for a group, such as the model's widths)."""
    indent = len(lines[row]) - len(lines[row].lstrip())
    while row >= 0:
        line = lines[row]
        if "#" in line:
            return True
        if not line.strip() or len(line) - len(line.lstrip()) != indent:
            return False
        row -= 1
    return False


def _tree(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_a_shipped_config_sets_no_key_to_its_default(path):
    defaults, cfg = load_config(None), load_config(path)
    repeated = [key for key in _leaf_keys(_tree(path))
                if _value(cfg, key) == _value(defaults, key)]
    assert not repeated, (f"{path.name} repeats the code's default of {repeated}: drop them (the "
                          "code is their one home)")


def test_the_default_config_differs_from_the_code_only_where_it_says_why():
    """`make run` (conf/default.yaml) runs what `load_config(None)` runs except for the keys the
    file sets, each with its reason on its line or the comment line above it."""
    path = CONF / "default.yaml"
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    differs = {key for key, value in _flat(load_config(path).model_dump(mode="json")).items()
               if value != _flat(load_config(None).model_dump(mode="json"))[key]}
    assert differs == set(_leaf_keys(_tree(path)))

    rows = _key_rows(yaml.compose(text))
    undocumented = [key for key in sorted(differs) if not _has_reason(lines, rows[key])]
    assert not undocumented, f"say why conf/default.yaml sets {sorted(undocumented)}"


def test_the_check_catches_a_repeated_default(tmp_path):
    """The companion: a config that repeats a default is what the first test refuses."""
    path = tmp_path / "repeat.yaml"
    path.write_text("ingest:\n  max_len: 8\n  max_distance_km: 0.5\n", encoding="utf-8")
    defaults, cfg = load_config(None), load_config(path)
    assert [k for k in _leaf_keys(_tree(path)) if _value(cfg, k) == _value(defaults, k)] == [
        "ingest.max_len"]
