"""The table catalogue: every table's name, zone, partitioning and columns, in one module.

This is the data model of docs/architecture.md section 3 in code. Each entry is a `Table`, a `str`
(the qualified name, so `spark.table(T)` and f-strings take it as is) that also carries its zone,
partition columns and column types. `jobs.spark.catalog.write_table` / `append_table` take a
`Table`, write it with its partitioning and refuse data whose columns differ from the entry, so
a stage cannot drift from the catalogue silently. Stages import the tables they read and write
from here; no other module spells a table name.

Zones (databases): `trajpriv_raw` (restricted: personal data; folder 0700), `trajpriv_trusted`
(figures derived from raw data without accounted noise: evaluation, study), `trajpriv_pub`
(published: what analysts query through `trajpriv sql`).
"""

from __future__ import annotations

RAW_DB = "trajpriv_raw"
TRUSTED_DB = "trajpriv_trusted"
PUB_DB = "trajpriv_pub"
DATABASES = (RAW_DB, TRUSTED_DB, PUB_DB)
#: The zones an analyst may read (`trajpriv sql` without --trusted).
PUBLISHED_DATABASES = (PUB_DB,)


class Table(str):
    """A catalogue entry: the qualified table name, with zone, partitioning and columns.

    `columns` is the full column list in DDL form (partition columns included, any order);
    `view` marks a view (no partitioning, never written by `write_table`); `notes` gives the
    columns whose meaning in this table differs from the glossary `COLUMN_NOTES`.
    """

    db: str
    partition_by: tuple[str, ...]
    columns: str
    holds: str
    view: bool
    notes: dict[str, str]

    def __new__(cls, name: str, *, partition_by: tuple[str, ...] = (), columns: str,
                holds: str, view: bool = False, notes: dict[str, str] | None = None) -> Table:
        obj = super().__new__(cls, name)
        obj.db = name.split(".", 1)[0]
        if obj.db not in DATABASES:
            raise ValueError(f"table {name}: database must be one of {DATABASES}")
        obj.partition_by = tuple(partition_by)
        obj.columns = columns
        obj.holds = holds
        obj.view = view
        obj.notes = dict(notes or {})
        unknown = set(obj.notes) - set(obj.column_types())
        if unknown:
            raise ValueError(f"table {name}: notes for unknown columns {sorted(unknown)}")
        if any("'" in text for text in obj.comments().values()):  # they go into SQL as is
            raise ValueError(f"table {name}: a column comment holds a quote")
        return obj

    @property
    def short(self) -> str:
        """The name inside its database (`points` for `trajpriv_raw.points`)."""
        return self.split(".", 1)[1]

    def column_types(self) -> dict[str, str]:
        """{column: Spark simpleString type} from `columns` (types may hold commas: `<...>`)."""
        out, depth, start = {}, 0, 0
        text = self.columns + ","
        for i, ch in enumerate(text):
            depth += ch == "<"
            depth -= ch == ">"
            if ch == "," and depth == 0:
                name, typ = text[start:i].strip().split(" ", 1)
                out[name] = typ.strip().replace(" ", "")
                start = i + 1
        return out

    def comments(self) -> dict[str, str]:
        """{column: comment} for every column: this table's note, else the glossary's. What
        `DESCRIBE` shows (written into the metastore when the table or view is created)."""
        return {c: self.notes.get(c) or COLUMN_NOTES[c] for c in self.column_types()}

    def view_columns(self) -> str:
        """The column list of `CREATE VIEW <name> (...) AS`, with the comments, in the order of
        `columns` (the view's SELECT lists its columns in that order)."""
        return "(" + ", ".join(f"{c} COMMENT '{text}'" for c, text in self.comments().items()) + ")"


#: What a column holds wherever its name appears (a table's `notes` override it). Shown by
#: `DESCRIBE` so an analyst reads a table without this file; say the privacy status where it
#: matters (public by design, DP-released, raw).
COLUMN_NOTES: dict[str, str] = {
    "user_id": "raw user identifier (personal data)",
    "pseudonym": "keyed pseudonym of the user (HMAC; collect.pseudonym: none, stable or per "
                 "window), null when none is published",
    "ts": "record time (UTC)",
    "lat": "latitude (WGS84 degrees) of the public location",
    "lon": "longitude (WGS84 degrees) of the public location",
    "loc_id": "id of a location in the public location set (trajpriv_pub.locations)",
    "loc_ids": "location ids of the trajectory, in visiting order",
    "dataset": "dataset name (conf: dataset)",
    "date": "day of the trajectory (published at the coarsening collect.date sets)",
    "traj_id": "trajectory number within the user day",
    "traj_key": "keyed id of one released trajectory (HMAC; stable or per release)",
    "n": "number of points in the trajectory",
    "slots": "48 location ids, one per half-hour of the day",
    "slot": "half-hour slot of the day (0 = 00:00-00:30)",
    "seq": "position of the point in its trajectory (0-based)",
    "split": "train or holdout (users split for the membership attacks)",
    "source": "input file the record came from",
    "record": "the refused input record as read",
    "reason": "why ingest refused the record, with the fix",
    "ingested_at": "when ingest read the record (UTC)",
    "run_id": "id of the stage run that wrote the row (trajpriv_pub.runs)",
    "release_id": "id of the collect release (trajpriv_pub.releases)",
    "mechanism": "LDP mechanism of the release (tp, atp, exp, uniform, ngram, tracs_d, ...)",
    "epsilon": "privacy parameter epsilon of the release",
    "delta": "privacy parameter delta of the release",
    "state": "planned (charged before the release), spent, or a release marker (published, "
             "registered, evaluated)",
    "detail": "JSON facts of a release marker row",
    "recorded_at": "when the ledger row was written (UTC)",
    "stage": "pipeline stage (collect, train, ...)",
    "setting": "epsilon or other setting the figure was measured at",
    "metric": "name of the measured figure",
    "value": "value of the figure",
    "method": "mechanism or model evaluated",
    "created_at": "when the row was written (UTC)",
    "trajectories": "number of trajectories published in the release",
    "points": "number of points published in the release",
    "model": "generator (pategail++, pategail, ...)",
    "privacy_model": "central (DP training, user-level) or local (LDP variants)",
    "traj_no": "number of the synthetic day within the run",
    "config": "full configuration of the stage (YAML)",
    "started_at": "stage start (UTC)",
    "finished_at": "stage end (UTC)",
    "status": "ok or failed",
    "figures": "public figures of the stage (JSON)",
}


# --- raw zone ---------------------------------------------------------------------------------
POINTS = Table(
    f"{RAW_DB}.points", partition_by=("dataset", "date"),
    columns="user_id string, ts timestamp, lat double, lon double, loc_id int, dataset string, "
            "date date",
    holds="every accepted raw point, snapped to its public location",
    notes={"lat": "raw latitude of the record (WGS84 degrees)",
           "lon": "raw longitude of the record (WGS84 degrees)",
           "date": "day of the record (UTC)"})
TRAJECTORIES = Table(
    f"{RAW_DB}.trajectories", partition_by=("dataset", "date"),
    columns="user_id string, traj_id int, loc_ids array<int>, ts array<timestamp>, n int, "
            "dataset string, date date",
    holds="raw trajectories (location id sequences), the input of collect",
    notes={"ts": "record time of each point (UTC)", "date": "day of the trajectory (UTC)"})
SLOT_DAYS = Table(
    f"{RAW_DB}.slot_days", partition_by=("dataset", "date"),
    columns="user_id string, slots array<int>, dataset string, date date",
    holds="48 half-hour location ids per user-day, the input of train and evaluate")
SLOT_DAYS_SPLIT = Table(
    f"{RAW_DB}.slot_days_split", partition_by=("dataset", "split"),
    columns="user_id string, date date, slots array<int>, dataset string, split string",
    holds="slot days split by user into train and holdout (membership attacks)")
QUARANTINE = Table(
    f"{RAW_DB}.quarantine", partition_by=("dataset",),
    columns="source string, record string, reason string, ingested_at timestamp, "
            "dataset string",
    holds="input records refused by ingest, with the reason")
PRIVACY_LEDGER = Table(
    f"{RAW_DB}.privacy_ledger", partition_by=("stage", "release_id"),
    columns="dataset string, user_id string, date date, traj_id bigint, traj_key string, "
            "run_id string, mechanism string, epsilon double, delta double, state string, "
            "detail string, recorded_at timestamp, stage string, release_id string",
    holds="append-only ledger of every release's privacy cost per user",
    notes={"epsilon": "epsilon charged to the user by this row",
           "delta": "delta charged to the user by this row",
           "date": "day of the charged trajectory (null for training)",
           "user_id": "raw user identifier (null on release marker rows)"})

# --- trusted zone -----------------------------------------------------------------------------
EVALUATION = Table(
    f"{TRUSTED_DB}.evaluation", partition_by=("dataset", "run_id", "method"),
    columns="setting double, metric string, value double, created_at timestamp, "
            "dataset string, run_id string, method string",
    holds="divergences and attack figures against the real days (not DP)",
    notes={"run_id": "the run evaluated (collect release or train run)"})
# `method` of the synthesis study's rows in EVALUATION: the prefix and the method's name
SYNTHESIS_STUDY_PREFIX = "synthesis-study:"
STUDY_PERTURBED = Table(
    f"{TRUSTED_DB}.study_perturbed", partition_by=("dataset", "run_id"),
    columns="user_id string, date date, traj_id bigint, mechanism string, epsilon double, "
            "loc_ids array<int>, dataset string, run_id string",
    holds="the epsilon study's perturbed copies (linked to users: never published)",
    notes={"epsilon": "epsilon of the study perturbation"})

#: What epsilon, delta and run_id mean in the synthetic table and its view.
_SYNTHETIC_NOTES = {"epsilon": "epsilon the training run spent (per user)",
                    "delta": "delta of the accounting of the training run",
                    "run_id": "the train run whose policy generated the days"}

# --- published zone ---------------------------------------------------------------------------
LOCATIONS = Table(
    f"{PUB_DB}.locations", partition_by=("dataset",),
    columns="loc_id int, lat double, lon double, dataset string",
    holds="the public location set P")
PERTURBED_TRAJECTORIES = Table(
    f"{PUB_DB}.perturbed_trajectories", partition_by=("dataset", "release_id"),
    columns="run_id string, mechanism string, epsilon double, pseudonym string, "
            "traj_key string, date date, loc_ids array<int>, n int, dataset string, "
            "release_id string",
    holds="LDP-perturbed trajectories, one row per released trajectory")
PERTURBED_POINTS = Table(
    f"{PUB_DB}.perturbed_points", view=True,
    columns="release_id string, dataset string, mechanism string, epsilon double, "
            "pseudonym string, traj_key string, date date, seq int, loc_id int, lat double, "
            "lon double",
    holds="view: one row per published point with its public coordinates")
RELEASES = Table(
    f"{PUB_DB}.releases", partition_by=("dataset", "release_id"),
    columns="mechanism string, epsilon double, trajectories bigint, points bigint, "
            "created_at timestamp, dataset string, release_id string",
    holds="one row per collect release (counts of what was published)")
SYNTHETIC_TRAJECTORIES = Table(
    f"{PUB_DB}.synthetic_trajectories", partition_by=("dataset", "run_id"),
    columns="model string, epsilon double, delta double, privacy_model string, traj_no bigint, "
            "slots array<int>, dataset string, run_id string",
    holds="synthetic slot days sampled from a DP-trained policy",
    notes=_SYNTHETIC_NOTES)
SYNTHETIC_POINTS = Table(
    f"{PUB_DB}.synthetic_points", view=True,
    columns="run_id string, dataset string, model string, epsilon double, delta double, "
            "privacy_model string, traj_no bigint, slot int, loc_id int, lat double, lon double",
    holds="view: one row per synthetic slot with its location's coordinates",
    notes=_SYNTHETIC_NOTES)
RUNS = Table(
    f"{PUB_DB}.runs",
    columns="run_id string, stage string, config string, started_at timestamp, "
            "finished_at timestamp, status string, figures string",
    holds="one row per stage execution: settings, status and its public figures")

#: Every table and view, by qualified name.
ALL: dict[str, Table] = {
    t: t for t in (POINTS, TRAJECTORIES, SLOT_DAYS, SLOT_DAYS_SPLIT, QUARANTINE,
                   PRIVACY_LEDGER, EVALUATION, STUDY_PERTURBED, LOCATIONS,
                   PERTURBED_TRAJECTORIES, PERTURBED_POINTS, RELEASES,
                   SYNTHETIC_TRAJECTORIES, SYNTHETIC_POINTS, RUNS)
}


def schema_differences(table: Table, df_columns: dict[str, str]) -> list[str]:
    """How `df_columns` ({name: simpleString type}) differs from the catalogue entry."""
    want = table.column_types()
    diffs = [f"missing column {c} {t}" for c, t in want.items() if c not in df_columns]
    diffs += [f"unexpected column {c} {t}" for c, t in df_columns.items() if c not in want]
    diffs += [f"column {c} is {df_columns[c]}, the catalogue says {t}"
              for c, t in want.items() if c in df_columns and df_columns[c] != t]
    return diffs
