"""Limits a tool can hold in jobs/, udfs/, models/ and airflow_dags/.

1. No function takes more than MAX_PARAMS parameters (self/cls not counted) or spans more than
   MAX_LINES lines, except the ones named in EXCEPTIONS, each held to its recorded size: an
   exception may shrink (then lower or drop its entry) but never grow, and there are at most
   MAX_EXCEPTIONS of them. They are public entry points whose keyword options mirror a paper's
   or a kernel's parameters (`perturb`, `per_user`, `release_markov`), numerical kernels whose
   steps share many arrays (the samplers of `udfs.sampling`, `perturb_copy_batch`), and the
   evaluate stage still to be split.
2. No module is longer than MAX_MODULE_LINES lines, except the ones named in
   MODULE_EXCEPTIONS, each held to its recorded length the same way: past that a module holds
   more than one concern, and its reader looks for a fact in the wrong half.
3. No Earth-radius or degree-conversion literal outside `udfs/geo.py`: every geographic
   constant is derived there.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("jobs", "udfs", "models", "airflow_dags")
MAX_PARAMS = 7
MAX_LINES = 60
MAX_MODULE_LINES = 600
MAX_EXCEPTIONS = 15

#: module -> lines it may not exceed.
MODULE_EXCEPTIONS: dict[str, int] = {
    "jobs/collect/stage.py": 815,
    "models/audit.py": 665,
}

#: function -> (parameters, lines) it may not exceed.
EXCEPTIONS: dict[str, tuple[int, int]] = {
    "jobs.evaluate.stage:_chunk_summaries": (11, 60),
    "jobs.evaluate.stage:pair_summaries": (5, 86),
    "jobs.evaluate.stage:run": (3, 87),
    "jobs.spark.per_user:per_user": (9, 18),
    "jobs.spark.per_user:per_user_local": (8, 25),
    "models.markov:release_markov": (9, 27),
    "udfs.atp:perturb_region": (9, 31),
    "udfs.collect:perturb": (12, 51),
    "udfs.collect:perturb_padded": (8, 20),
    "udfs.collect_plan:plan_users": (6, 70),
    "udfs.sampling:_bitset_stage": (9, 53),
    "udfs.sampling:_list_stage": (8, 19),
    "udfs.sampling:_one_sector_stage": (9, 32),
    "udfs.tp:perturb_copy": (8, 9),
    "udfs.tp:perturb_copy_batch": (9, 71),
}


def _modules():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def _functions():
    """(qualified name, parameter count, line count) of every function of the packages."""
    for path in _modules():
        module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        yield from _walk(ast.parse(path.read_text()), f"{module}:")


def _walk(node, prefix: str):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            a = child.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            n = sum(p is not None for p in params)
            if a.args and a.args[0].arg in ("self", "cls"):
                n -= 1
            yield f"{prefix}{child.name}", n, child.end_lineno - child.lineno + 1
            yield from _walk(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _walk(child, f"{prefix}{child.name}.")


def test_functions_stay_within_the_parameter_and_length_limits():
    over = []
    for name, params, lines in _functions():
        cap_params, cap_lines = EXCEPTIONS.get(name, (MAX_PARAMS, MAX_LINES))
        if params > max(cap_params, MAX_PARAMS) or lines > max(cap_lines, MAX_LINES):
            over.append(f"{name}: {params} parameters, {lines} lines (limit "
                        f"{max(cap_params, MAX_PARAMS)}, {max(cap_lines, MAX_LINES)})")
    assert not over, ("split these, or pass a parameter object:\n" + "\n".join(over))


def test_the_exceptions_stay_few():
    assert len(EXCEPTIONS) <= MAX_EXCEPTIONS, "split a function before naming another exception"


def test_every_exception_still_exists():
    names = {name for name, _, _ in _functions()}
    assert not sorted(set(EXCEPTIONS) - names), "drop the entries of removed functions"


def test_modules_stay_within_the_length_limit():
    over = []
    for path in _modules():
        name = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text().splitlines())
        cap = max(MODULE_EXCEPTIONS.get(name, MAX_MODULE_LINES), MAX_MODULE_LINES)
        if lines > cap:
            over.append(f"{name}: {lines} lines (limit {cap})")
    assert not over, "split these by concern:\n" + "\n".join(over)


def test_every_module_exception_still_exists():
    assert not sorted(n for n in MODULE_EXCEPTIONS if not (ROOT / n).is_file()), (
        "drop the entries of removed modules")


def _geographic(value) -> bool:
    """An Earth radius in km or m, km per degree, or a degree/radian factor."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (6350 <= value <= 6400 or 6.35e6 <= value <= 6.4e6 or 110.5 <= value <= 111.5
            or 57.29 <= value <= 57.3 or 0.01745 <= value <= 0.017454)


def test_no_geographic_literal_outside_geo():
    found = []
    for path in _modules():
        if path == ROOT / "udfs" / "geo.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and _geographic(node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert not found, "derive it from udfs.geo (EARTH_RADIUS_KM, KM_PER_DEGREE):\n" + "\n".join(
        found)
