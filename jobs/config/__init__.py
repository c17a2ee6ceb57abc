"""Pipeline configuration: pydantic models loaded from `conf/*.yaml`, overridable on the CLI.

Why pydantic with `extra="forbid"` everywhere: a misspelt key in a 9,481-user run must fail at
start, naming the key, not after an hour of Spark work with the default silently used.

Overrides use dotted paths, `--set study.epsilons=[1,4]`; the value is parsed as YAML so lists,
numbers and booleans need no extra syntax.

The package, by concern (docs/architecture.md, "The configuration"):
- `types`: the value types and checks several sections share (epsilon, finite, lat/lon box,
  date window) and the `Section` base;
- `platform` (storage, catalog, spark, serve), `data` (datagen, ingest), `release` (privacy,
  publish, collect, study), `synthesis` (train, synthesize), `evaluation` (evaluate, report):
  the sections, their choices taken from the registries and defaults from the core's
  dataclasses;
- `pipeline`: `STAGES` and the top-level `Config`;
- `loader`: `load_config` and its helpers (YAML, overrides, where `storage.root` resolves).

Every name is importable from `jobs.config` itself.
"""

from jobs.config.data import DatagenConfig, IngestConfig, format_holds_year
from jobs.config.evaluation import EvaluateConfig, ReportConfig
from jobs.config.loader import (
    HOME_ENV,
    config_from_mapping,
    load_config,
    packaged_config,
    parse_override,
    resolve_root,
)
from jobs.config.pipeline import STAGES, Config
from jobs.config.platform import CatalogConfig, ServeConfig, SparkConfig, StorageConfig
from jobs.config.release import (
    CollectConfig,
    Mechanism,
    PrivacyConfig,
    PublishConfig,
    PublishedMechanism,
    StudyConfig,
)
from jobs.config.synthesis import (
    Markov2Settings,
    MarkovSettings,
    SynthesizeConfig,
    TrainConfig,
)
from udfs.errors import ConfigError  # what every config check raises (`except c.ConfigError`)

__all__ = [
    "HOME_ENV", "STAGES", "CatalogConfig", "CollectConfig", "Config", "ConfigError",
    "DatagenConfig", "EvaluateConfig", "IngestConfig", "Markov2Settings", "MarkovSettings",
    "Mechanism", "PrivacyConfig",
    "PublishConfig", "PublishedMechanism", "ReportConfig", "ServeConfig", "SparkConfig",
    "StorageConfig", "StudyConfig", "SynthesizeConfig", "TrainConfig", "config_from_mapping",
    "format_holds_year", "load_config", "packaged_config", "parse_override", "resolve_root",
]
