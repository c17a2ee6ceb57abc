"""A run's folder in the trusted zone, `<root>/runs/<run_id>/`: the one writer of its files.

Figures a stage keeps out of the published run log (raw-derived counts, diagnostics), explain
reports and training artefacts live here: folder 0700, files 0600. No Spark: any stage and the
harness import it.
"""

from __future__ import annotations

from typing import Any

from jobs.config import Config


def write_run_json(cfg: Config, run_id: str, name: str, data: dict[str, Any]) -> str:
    """`<root>/runs/<run_id>/<name>` as JSON, in the trusted zone (folder 0700, file 0600):
    the one writer of a run folder's figures and reports."""
    import json
    import os

    folder = cfg.storage.runs_dir / run_id
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    path = folder / name
    path.write_text(json.dumps(data, indent=2, default=str, sort_keys=True), encoding="utf-8")
    os.chmod(path, 0o600)
    return str(path)


def write_trusted_figures(cfg: Config, run_id: str, figures: dict[str, Any]) -> str:
    """All figures of a run as `<root>/runs/<run_id>/figures.json` (trusted zone)."""
    return write_run_json(cfg, run_id, "figures.json", figures)
