"""`make dist` (issue 20): a wheel and an sdist that carry the configs and dependency ranges.

The build is the Makefile's command (`python -m build --no-isolation`, the `dist` fixture of
tests/jobs/conftest.py): the sdist first, then the wheel from the unpacked sdist, so a file the
sdist forgets is missing from the wheel too. tests/reliability/test_standalone_pipeline.py runs the
zip on a standalone cluster.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p.name for p in (ROOT / "conf").glob("*.yaml"))


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("trajpriv-*.whl")
    return wheel


def _requirements(dist: Path) -> dict[str, Requirement]:
    with zipfile.ZipFile(_wheel(dist)) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    reqs = [Requirement(ln.split(":", 1)[1]) for ln in lines if ln.startswith("Requires-Dist:")]
    return {r.name: r for r in reqs if r.marker is None}


def test_wheel_ships_the_configs_and_the_entry_point(dist: Path):
    names = set(zipfile.ZipFile(_wheel(dist)).namelist())
    assert {f"jobs/conf/{c}" for c in CONFIGS} <= names
    assert {"jobs/submit.py", "jobs/cli.py", "udfs/__init__.py", "models/__init__.py"} <= names
    assert not any(n.startswith("tests/") for n in names)
    with tarfile.open(next(dist.glob("trajpriv-*.tar.gz"))) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {f"conf/{c}" for c in CONFIGS} | {"setup.py", "pyproject.toml"} <= members


def test_pyspark_is_a_range_a_cluster_spark_4_satisfies_and_constraints_pin_the_tested(dist):
    reqs = _requirements(dist)
    spark = reqs["pyspark"].specifier
    assert not any(s.operator == "==" for s in spark), spark
    assert all(v in spark for v in ("4.0.0", "4.1.1", "4.3.0")) and "5.0.0" not in spark
    assert str(reqs["torch"].specifier) == "==2.13.0"
    pins = dict(re.findall(r"^([\w-]+)==(\S+)", (ROOT / "constraints.txt").read_text(), re.M))
    assert pins["torch"] == "2.13.0" and pins["pyspark"] in spark
    makefile = (ROOT / "Makefile").read_text()
    assert '-c $(CONSTRAINTS) -e ".[test]"' in makefile
    assert "CONSTRAINTS := constraints.txt" in makefile


def test_the_wheel_alone_finds_its_packaged_config_from_any_folder(dist: Path, tmp_path: Path):
    """The wheel as a zip on sys.path (as --py-files puts it), outside the checkout: the packaged
    default loads, its root under $TRAJPRIV_HOME; without TRAJPRIV_HOME one clear error.

    Defect (issue 20): every command's `--config` default was the path `<zip>/jobs/conf/
    default.yaml`, no file, so `spark-submit --py-files trajpriv.zip jobs/submit.py datagen`
    without `--config` failed with "config file ... does not exist"; the default is now the
    packaged config itself, read from inside the zip."""
    script = (
        "import jobs, jobs.config as c, jobs.harness as h\n"
        "assert jobs.__file__.startswith(sys.argv[1]), jobs.__file__\n"
        "default = h.build_parser('datagen').parse_args([]).config\n"
        "try:\n"
        "    print('ROOT', c.load_config(c.packaged_config()).storage.root)\n"
        "    print('ROOT', c.load_config(default).storage.root)\n"
        "except c.ConfigError as e:\n"
        "    print('ERROR', e)\n"
    )
    wheel = str(_wheel(dist))
    env = {k: v for k, v in os.environ.items() if k not in ("TRAJPRIV_HOME", "PYTHONPATH")}
    env["PYTHONPATH"] = wheel
    run = [sys.executable, "-c", "import sys\n" + script, wheel]
    home = tmp_path / "home"
    with_home = subprocess.run(run, cwd=tmp_path, env={**env, "TRAJPRIV_HOME": str(home)},
                               capture_output=True, text=True, timeout=120, check=True)
    assert with_home.stdout.split("\n")[:2] == [f"ROOT {home / 'data'}"] * 2, with_home.stdout
    without = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120, check=True)
    assert without.stdout.startswith("ERROR ") and "TRAJPRIV_HOME" in without.stdout
