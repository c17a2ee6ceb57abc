"""Loading a config: a YAML file (or the built-in defaults), `--set` overrides, validation
with errors that name the key, and `storage.root` made absolute.

`storage.root` never depends on the working directory (`resolve_root`): a relative root resolves
against the folder of the config file, whether the file or a `--set` gave it. A config that is
not a file of yours (the built-in defaults of `load_config(None)`, or the packaged copy of conf/
inside the wheel) resolves against `$TRAJPRIV_HOME/conf` (TRAJPRIV_HOME: an absolute folder
holding conf/ and data/), else the checkout's conf/. Other relative paths of a config
(ingest.path, ...) are resolved against the directory the command runs from (the repository root
for `make run`).
"""

from __future__ import annotations

import os
import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from jobs.config.pipeline import Config
from udfs.errors import ConfigError


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    if parts[:2] == ["spark", "conf"] and len(parts) > 2:  # spark.* keys contain dots themselves
        parts = ["spark", "conf", ".".join(parts[2:])]
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", parsed YAML value). Raises ConfigError naming the bad override."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*|\.spark\.[\w.]+)*", key):
        raise ConfigError(f"--set {text!r}: expected key.path=value, e.g. study.epsilons=[1,4]")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc})") from None
    return key, value


def _format_validation(exc: ValidationError, source: str) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = "unknown key (not allowed here)" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"  {key}: {msg}")
    return f"invalid configuration ({source}):\n" + "\n".join(lines)


def config_from_mapping(tree: dict[str, Any], source: str = "<mapping>") -> Config:
    try:
        return Config.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, source)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader refusing a key given twice in one mapping: plain YAML keeps the last,
    so a second `ingest:` section would silently drop every key of the first."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"key {key!r} appears twice (lines {seen[key]} and "
                    f"{key_node.start_mark.line + 1}); merge the two into one",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


#: An absolute folder holding conf/ and data/ (a checkout or an unpacked release): the base of a
#: relative storage.root for configs that are not a file of yours (packaged ones, the defaults).
HOME_ENV = "TRAJPRIV_HOME"
#: conf/ of a source checkout (absent in an installed wheel, where the configs are `jobs.conf`).
_CHECKOUT_CONF = Path(__file__).resolve().parents[2] / "conf"
#: Where an installed wheel keeps its copy of conf/ (absent in a checkout).
_PACKAGED_CONF = Path(__file__).resolve().parents[1] / "conf"


def packaged_config(name: str = "default") -> Traversable:
    """conf/<name>.yaml as shipped: the checkout's file when running from one, else the wheel's
    copy (package data `jobs.conf`, readable even from a `--py-files` zip). The default of
    `--config`: unlike a relative "conf/default.yaml", it does not depend on the working
    directory."""
    if (_CHECKOUT_CONF / f"{name}.yaml").is_file():
        return _CHECKOUT_CONF / f"{name}.yaml"
    return resources.files("jobs").joinpath("conf", f"{name}.yaml")


def _default_conf_dir(source: str) -> Path:
    """The folder a config that is not a file of yours stands in: $TRAJPRIV_HOME/conf, else the
    checkout's conf/; ConfigError when neither exists (an installed wheel without TRAJPRIV_HOME)."""
    home = os.environ.get(HOME_ENV, "")
    if home:
        folder = Path(home).expanduser()
        if not folder.is_absolute():
            raise ConfigError(f"{HOME_ENV}={home!r} is a relative path: set it to an absolute "
                              "folder (storage.root's relative default is $TRAJPRIV_HOME/data)")
        return folder / "conf"
    if _CHECKOUT_CONF.is_dir():
        return _CHECKOUT_CONF
    raise ConfigError(f"{source}: storage.root is relative and there is no config folder to "
                      f"resolve it against: set storage.root to an absolute folder (--set "
                      f"storage.root=/data/trajpriv), pass --config FILE, or export "
                      f"{HOME_ENV}=<absolute folder> (data then goes to $TRAJPRIV_HOME/data)")


def resolve_root(root: Path, config_dir: Path) -> Path:
    """`root` made absolute: `~` expanded, a relative root joined to `config_dir` (the config
    file's folder), never to the working directory, so every command on one config opens the
    same catalog wherever it runs from."""
    root = root.expanduser()
    if root.is_absolute():
        return root
    return Path(os.path.normpath(config_dir / root))


def _is_packaged(file: Traversable) -> bool:
    if not isinstance(file, Path):
        return True  # inside a zip (--py-files): only the wheel's own copy can be there
    return file.resolve().is_relative_to(_PACKAGED_CONF)


def load_config(
    path: str | os.PathLike[str] | Traversable | None, overrides: list[str] | None = None
) -> Config:
    """Load a YAML config, apply `key.path=value` overrides, validate; ConfigError if wrong.

    `path`: a config file, a `packaged_config()`, or None for the built-in defaults. The root
    comes back absolute (`resolve_root`)."""
    tree: dict[str, Any] = {}
    source = "defaults"
    config_dir: Path | None = None
    if path is not None:
        file = path if isinstance(path, Traversable) else Path(path)
        source = str(file)
        if not file.is_file():
            raise ConfigError(f"config file {file} does not exist")
        if not _is_packaged(file):
            config_dir = Path(os.path.abspath(file)).parent
        try:
            loaded = yaml.load(file.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {file} is not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {file}: top level must be a mapping of sections")
        tree = loaded
    for text in overrides or []:
        key, value = parse_override(text)
        _set_dotted(tree, key, value)
    if overrides:
        source += " with --set " + " ".join(overrides)
    cfg = config_from_mapping(tree, source)
    root = cfg.storage.root.expanduser()
    if not root.is_absolute():
        root = resolve_root(root, config_dir or _default_conf_dir(source))
    return cfg.model_copy(update={"storage": cfg.storage.model_copy(update={"root": root})})
