"""The whole pipeline's configuration: the stages in order and the top-level model that holds
one section per concern (each defined in the module of its group)."""

from __future__ import annotations

import re

import yaml
from pydantic import Field, field_validator

from jobs.config.data import DatagenConfig, IngestConfig
from jobs.config.evaluation import EvaluateConfig, ReportConfig
from jobs.config.platform import CatalogConfig, ServeConfig, SparkConfig, StorageConfig
from jobs.config.release import CollectConfig, PrivacyConfig, PublishConfig, StudyConfig
from jobs.config.synthesis import SynthesizeConfig, TrainConfig
from jobs.config.types import Section

#: The pipeline's stages in order, each a package `jobs.<stage>` (`trajpriv <stage>`).
STAGES = ("datagen", "ingest", "study", "collect", "train", "synthesize", "evaluate", "report")


class Config(Section):
    """The whole pipeline. `dataset` names the rows every stage reads and writes."""

    dataset: str = "synthetic"  # the rows' name in every table (a partition): one per source
    # every draw of every stage derives from it (keyed per stage, setting and user); >= 0
    seed: int = Field(20260601, ge=0)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    datagen: DatagenConfig = Field(default_factory=DatagenConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    publish: PublishConfig = Field(default_factory=PublishConfig)
    study: StudyConfig = Field(default_factory=StudyConfig)
    collect: CollectConfig = Field(default_factory=CollectConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    synthesize: SynthesizeConfig = Field(default_factory=SynthesizeConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)

    @field_validator("dataset")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", value):
            raise ValueError("use 1-64 letters, digits, '_' or '-'")
        return value

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
