"""`spark-submit jobs/submit.py <stage> [--config FILE] [--set K=V ...]`: the cluster entry point.

It is the command line of `trajpriv` (`jobs.cli.main`) under spark-submit, so both take one path:
the same stage registry, parser, config check and run record. The project must be importable on
the driver: installed in the interpreter (`make venv`), or shipped with `--py-files
dist/trajpriv.zip` (`make dist`). Set PYTHONSAFEPATH=1 (the DAG does) so this script's folder is
not put first on sys.path.
"""

import sys

from jobs.cli import main

if __name__ == "__main__":
    sys.exit(main())
