"""Package list of the wheel: the three code packages plus conf/ shipped as `jobs.conf`.

Why a setup.py beside pyproject.toml: `[tool.setuptools.packages.find]` cannot add a package
that lives outside the tree it searches, and the configs must ship inside the wheel (so an
installed copy, or one on `spark-submit --py-files`, finds its defaults with importlib.resources:
`jobs.config.packaged_config`) while conf/ stays where the README and `make run` expect it.
Everything else about the package is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["jobs", "jobs.*", "udfs", "udfs.*", "models", "models.*"]),
              "jobs.conf"],
    package_dir={"jobs.conf": "conf"},
    # the endpoints' read-only guard, compiled by `trajpriv serve` where it runs
    package_data={"jobs.conf": ["*.yaml"], "jobs.sql": ["java/*.java"]},
)
