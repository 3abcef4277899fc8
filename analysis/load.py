"""Reading responses from wherever they are into the one response schema.

A SOURCE is an experiment directory (its ``responses.sqlite``), a ``.sqlite`` store, a
CSV or Parquet file in the common schema (``cuebench.responses.COLUMNS``), or a
model-vs-human / Geirhos et al. (2019) raw CSV (``subj,session,trial,rt,object_response,
category,condition,imagename``), or a folder of either kind of CSV. Every loader returns
a DataFrame with exactly the schema's columns, so nothing downstream knows the origin.

Raw-format mapping (documented in docs/analysis.md):

- ``observer`` = ``subj``; ``observer_kind`` = ``model`` when ``rt`` is NaN in every row
  of that subject or the subject is a known model name (:data:`KNOWN_MODELS`),
  otherwise ``human``;
- ``trial_id`` = ``imagename`` without extension, leading trial number and the tokens that
  name the observer (:func:`raw_trial_ids`; ``0001_s5n_dnn_0_airplane_00_airplane1-bicycle2.png``
  -> ``s5n_0_airplane_00_airplane1-bicycle2``): the same image has the same id for every
  observer, which is what error consistency and the t-tests pair on; ``source_image`` =
  the last token (``airplane1-bicycle2``);
- ``texture_category`` = the last ``-``-separated token of that name with digits removed
  (``bicycle``), set only when the name has a ``-`` (cue-conflict images);
- ``condition`` = the data set (the folder's name, e.g. ``cue-conflict``), ``params`` =
  ``{"condition": <raw value>}``, ``level`` = position of the raw value among the data
  set's sorted distinct values, ``role`` = ``test``;
- a file written by cuebench's own export (``cuebench.export``) reads back exactly: its raw
  ``condition``, ``[<role>@][<trial type>/]<condition>:<level>:<k>=<json>,...``, gives the role,
  trial type, condition, level and parameters (:func:`decode_condition`); its image name
  ``NNNN_<kind>_<condition>_<level>_<class>_<trial id>_<stimulus>.png`` the observer kind, class,
  trial id, source image and texture class (:func:`own_name`, every token percent-decoded), and
  ``category`` is the answer scored against (``na``: none);
- read with an experiment directory, raw rows of an image it shows in the same condition take the
  experiment's level, trial id and parameters (:func:`onto_experiment_cells`), so published raw data and
  collected answers pair on one (condition, level, image) cell;
- ``na`` answers become an empty response with ``timed_out = 1`` (scored wrong);
  ``rt`` seconds -> ``rt_ms``; ``Session`` is accepted for ``session``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pandas as pd

from cuebench import exclusions
from cuebench.adaptive import SESSION_PREFIX
from cuebench.errors import CuebenchError
from cuebench.expdir import EXPERIMENT_FILE, RESPONSES_FILE
from cuebench.responses import COLUMNS, ResponseStore
from cuebench.storage import is_database_url, redacted
from cuebench.trial_types import UNTYPED

RAW_COLUMNS = ("subj", "session", "trial", "rt", "object_response", "category", "condition", "imagename")
KNOWN_MODELS = frozenset({
    "alexnet", "googlenet", "vgg", "vgg11", "vgg13", "vgg16", "vgg19", "resnet", "resnet18", "resnet34", "resnet50",
    "resnet101", "resnet152", "densenet", "inception", "mobilenet", "efficientnet", "squeezenet", "vit", "clip",
})
NO_ANSWER = "na"
PARAM_ALIASES = {"grid_size": "grid", "g": "grid", "sigma_colour": "sigma_color", "sigmacolor": "sigma_color",
                 "diameter": "d"}


class LoadError(CuebenchError, ValueError):
    """A source cannot be read; the message names the file and what is wrong."""


def load_responses(sources, database: str | None = None) -> pd.DataFrame:
    """All rows of one or more sources, concatenated, in the common response schema.
    Raw CSVs of all sources are mapped together, so their trial ids agree (see :func:`raw_trial_ids`).
    ``database`` (a ``postgresql://`` URL) holds the responses of the experiment directories given."""
    if isinstance(sources, (str, Path)):
        sources = [sources]
    if not sources:
        raise LoadError("no source given")
    common, raw = [], []
    for source in sources:
        frames, raw_files = read_source(Path(source), database)
        common += frames
        raw += raw_files
    if raw:
        common.append(onto_experiment_cells(raw_to_common(raw), experiment_cells(sources)))
    df = pd.concat(common, ignore_index=True) if len(common) > 1 else common[0]
    return conform(df, "the sources")


def logged_exclusions(sources, database: str | None = None) -> pd.DataFrame:
    """``observer, reason, by`` of everyone excluded in the exclusion logs (``cuebench.exclusions``)
    of the experiment directories among ``sources``: the report lists them even when they left
    no answer to read (screened out by the browser check before the first trial)."""
    records = []
    for path in map(Path, [sources] if isinstance(sources, (str, Path)) else sources):
        store_at = database or path / RESPONSES_FILE
        if (path / EXPERIMENT_FILE).is_file() and (database or (path / RESPONSES_FILE).is_file()):
            with ResponseStore(store_at) as store:
                records += [{"observer": observer, "reason": f"excluded: {event.label}", "by": event.by}
                            for (_, observer), event in exclusions.latest(store.conn).items() if event.excluded]
    return pd.DataFrame(records, columns=["observer", "reason", "by"])


def withdrawal_count(sources, database: str | None = None) -> int:
    """How many people withdrew from the experiment directories among ``sources`` (``cuebench withdraw``: their
    data are gone, the count stays, ``cuebench.exclusions.withdrawals``), for the methods paragraph."""
    count = 0
    for path in map(Path, [sources] if isinstance(sources, (str, Path)) else sources):
        if (path / EXPERIMENT_FILE).is_file() and (database or (path / RESPONSES_FILE).is_file()):
            name = json.loads((path / EXPERIMENT_FILE).read_text(encoding="utf-8"))["name"]
            with ResponseStore(database or path / RESPONSES_FILE) as store:
                count += exclusions.withdrawals(store.conn, name)
    return count


def read_source(path: Path, database: str | None = None) -> tuple[list[pd.DataFrame], list[tuple[Path, pd.DataFrame]]]:
    """One source: (frames already in the common schema, raw model-vs-human files still to map)."""
    if not path.exists():
        raise LoadError(f"{path}: no such file or folder")
    if path.is_dir() and database and (path / EXPERIMENT_FILE).is_file():
        return [load_store(database)], []
    if path.is_dir() and ((path / RESPONSES_FILE).is_file() or (path / EXPERIMENT_FILE).is_file()):
        return [load_store(path / RESPONSES_FILE)], []
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in (".csv", ".parquet"))
        if not files:
            raise LoadError(f"{path}: neither an experiment directory nor a folder of CSV/Parquet response files")
    else:
        files = [path]
    common, raw = [], []
    for file in files:
        df = read_file(file)
        if is_raw(df):
            raw.append((file, df))
        else:
            common.append(df)
    return common, raw


CELL_COLUMNS = ["condition", "level", "source_image", "trial_id", "params"]


def experiment_cells(sources) -> pd.DataFrame:
    """``condition, level, source_image, trial_id, params`` of every test trial of the experiment directories
    among ``sources``: the cells raw data of the same images are put on (:func:`onto_experiment_cells`)."""
    rows = []
    for path in map(Path, sources):
        if path.is_dir() and (path / EXPERIMENT_FILE).is_file():
            trials = json.loads((path / EXPERIMENT_FILE).read_text(encoding="utf-8")).get("trials", [])
            rows += [(t.get("condition", "original"), t.get("level"), t.get("source_image"), t["trial_id"],
                      json.dumps(t.get("params") or {}, sort_keys=True))
                     for t in trials if t.get("role") == "test" and t.get("source_image")]
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


def onto_experiment_cells(raw: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Raw rows (already in the common schema) of an image an experiment shows in the same condition take that
    experiment's cell: its level, trial id and parameters, so collected answers and published raw data pair on one
    (condition, level, image) cell in the t-tests, error consistency and noise ceilings.

    A raw data set whose ``condition`` column holds one value (Geirhos et al.'s edges and silhouettes: ``0``) is
    one level; where the experiment's condition has one level too (a labelled-set study: none), the raw level
    becomes the experiment's. Otherwise raw rows keep the position of their raw value as level and take the
    experiment's trial where that position is the experiment's level. Rows of images the experiment does not
    show keep the raw mapping."""
    if cells.empty or raw.empty:
        return raw
    out = raw.copy()
    for condition, part in out.groupby("condition"):
        levels = cells.loc[cells["condition"] == condition, "level"].drop_duplicates()
        if len(levels) == 1 and part["level"].nunique(dropna=False) == 1:
            level = levels.iloc[0]
            out.loc[part.index, "level"] = pd.NA if level is None or pd.isna(level) else int(level)
    unique = cells.assign(level=cells["level"].fillna(-1).astype(int))
    unique = unique.drop_duplicates(["condition", "level", "source_image"], keep=False)
    keys = pd.DataFrame({"condition": out["condition"].astype(object), "level": out["level"].fillna(-1).astype(int),
                         "source_image": out["source_image"].astype(object)})
    found = keys.merge(unique, on=["condition", "level", "source_image"], how="left")
    matched = found["trial_id"].notna().to_numpy()
    for column in ("trial_id", "params"):
        out.loc[matched, column] = found.loc[matched, column].to_numpy()
    return conform(out, "the raw data")


def is_raw(df: pd.DataFrame) -> bool:
    """True for a model-vs-human raw table (its eight columns, any capitalisation)."""
    return set(RAW_COLUMNS) <= {str(c).strip().lower() for c in df.columns}


def load_store(path: Path | str) -> pd.DataFrame:
    """A responses.sqlite file, or a ``postgresql://`` database URL."""
    if not is_database_url(path) and not Path(path).is_file():
        raise LoadError(f"{path}: the experiment has no responses yet")
    with ResponseStore(path) as store:
        return conform(store.dataframe(), redacted(path) if is_database_url(path) else path)


def read_file(path: Path) -> pd.DataFrame:
    """A store (conformed), or a CSV/Parquet table as read: raw model-vs-human columns or the common schema."""
    suffix = path.suffix.lower()
    if suffix == ".sqlite":
        return load_store(path)
    try:
        if suffix == ".parquet":
            df = pd.read_parquet(path)
        elif suffix == ".csv":
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
        else:
            raise LoadError(f"{path}: unknown response file type {suffix!r} (expected .sqlite, .csv or .parquet)")
    except (OSError, ValueError, pd.errors.ParserError) as err:
        if isinstance(err, LoadError):
            raise
        raise LoadError(f"{path}: cannot be read ({err})") from None
    if is_raw(df):
        return df
    missing = [c for c in ("observer", "trial_id", "response") if c not in df.columns]
    if missing:
        raise LoadError(f"{path}: column {missing[0]!r} is missing; expected the common response schema "
                        f"or the raw columns {','.join(RAW_COLUMNS)}")
    return conform(df, path)


def conform(df: pd.DataFrame, where) -> pd.DataFrame:
    """Exactly the schema's columns with usable dtypes; unknown columns are an error."""
    unknown = sorted(set(df.columns) - set(COLUMNS))
    if unknown:
        raise LoadError(f"{where}: unknown column {unknown[0]!r} (not in the response schema)")
    out = df.reindex(columns=list(COLUMNS)).copy()
    for name, (kind, _) in COLUMNS.items():
        col = out[name] if pd.api.types.is_numeric_dtype(out[name]) else out[name].replace("", np.nan)
        if kind is int or kind is float:
            numeric = pd.to_numeric(col, errors="coerce")
            bad = col.notna() & numeric.isna()
            if bad.any():
                raise LoadError(f"{where}: column {name!r} has a non-numeric value {col[bad].iloc[0]!r}")
            out[name] = numeric.astype("Float64") if kind is float else numeric.astype("Int64")
        else:
            out[name] = col.astype("string")
    out["response"] = out["response"].fillna("")
    out["observer_kind"] = out["observer_kind"].fillna("human")
    out["role"] = out["role"].fillna("test")
    out["trial_type"] = out["trial_type"].fillna(UNTYPED)
    out["condition"] = out["condition"].fillna("original")
    out["session"] = out["session"].fillna("1")
    out["experiment"] = out["experiment"].fillna("responses")
    out["excluded"] = out["excluded"].fillna(0)
    bad_kind = ~out["observer_kind"].isin(["human", "model", "pilot"])
    if bad_kind.any():
        raise LoadError(f"{where}: observer_kind must be 'human', 'model' or 'pilot', got "
                        f"{out['observer_kind'][bad_kind].iloc[0]!r}")
    for name in ("observer", "trial_id"):
        if out[name].isna().any():
            raise LoadError(f"{where}: column {name!r} is empty in row {int(out[name].isna().to_numpy().argmax())}")
    return out


def raw_trial_ids(imagenames: list[pd.Series]) -> list[pd.Series]:
    """Trial ids shared by every observer, from the image names of several raw files (one Series per file).

    Names are ``_``-separated tokens beginning with the trial number; some tokens name the observer
    (``s01``/``dnn`` in ``0001_s5n_s01_0_bird_00_bird3-bird2.png``, ``human``/``model`` in cuebench's
    own export). The id drops the trial number and every token position that is constant within each
    file but differs between files; the last token (the image itself) is always kept."""
    tokens = [names.map(lambda n: Path(n).stem.split("_")[1:]) for names in imagenames]
    width = min((len(t) for col in tokens for t in col), default=0) - 1
    observer_positions = []
    for pos in range(max(width, 0)):
        per_file = [set(col.map(lambda t: t[pos])) for col in tokens]
        if all(len(v) == 1 for v in per_file) and len(set.union(*per_file)) > 1:
            observer_positions.append(pos)
    return [col.map(lambda t: "_".join(tok for i, tok in enumerate(t) if i not in observer_positions))
            for col in tokens]


def stimulus_name(imagename: str) -> str:
    """``0001_s5n_dnn_0_airplane_00_airplane1-bicycle2.png`` -> ``airplane1-bicycle2``."""
    return Path(imagename).stem.rsplit("_", 1)[-1]


def texture_class(imagename: str) -> str | None:
    """Geirhos et al. 2019 cue-conflict name: last ``-`` token, digits removed (``bicycle2`` -> ``bicycle``)."""
    name = stimulus_name(imagename)
    if "-" not in name:
        return None
    return re.sub(r"\d", "", name.rsplit("-", 1)[-1])


def observer_kind(subject: str, rt: pd.Series) -> str:
    """``model`` when every rt is NaN or the name is a known model, else ``human``."""
    if rt.isna().all() or subject.lower() in KNOWN_MODELS:
        return "model"
    return "human"


def raw_to_common(files: list[tuple[Path, pd.DataFrame]]) -> pd.DataFrame:
    """Map raw model-vs-human CSVs into the common schema together (rules in the module docstring)."""
    files = [(path, raw.rename(columns={c: c.strip().lower() for c in raw.columns})) for path, raw in files]
    ids = raw_trial_ids([raw["imagename"] for _, raw in files])
    return pd.concat([_raw_file_to_common(raw, path, trial_ids) for (path, raw), trial_ids in zip(files, ids)],
                     ignore_index=True)


def _raw_file_to_common(raw: pd.DataFrame, path: Path, trial_ids: pd.Series) -> pd.DataFrame:
    dataset = path.parent.name or "raw"
    experiment = path.stem.split("_")[0] if "_" in path.stem else dataset
    rt = pd.to_numeric(raw["rt"].replace({"": np.nan, NO_ANSWER: np.nan}), errors="coerce")
    trial = pd.to_numeric(raw["trial"], errors="coerce")
    if trial.isna().any():
        raise LoadError(f"{path}: column 'trial' has a non-numeric value {raw['trial'][trial.isna()].iloc[0]!r}")
    raw["condition"] = raw["condition"].astype(str)
    raw_conditions = sorted(raw["condition"].unique(), key=_natural_key)
    decoded = {c: decode_condition(c) for c in raw_conditions}
    own = pd.Series([decoded[c] is not None and own_name(n) is not None
                     for c, n in zip(raw["condition"], raw["imagename"])], index=raw.index)
    named = raw["imagename"].map(lambda n: own_name(n) or {})

    def field(key: str, otherwise: pd.Series) -> pd.Series:
        """A field of cuebench's own image names where the row has one, else the raw mapping's value."""
        return named.map(lambda d: d.get(key)).where(own, otherwise)

    answer = raw["object_response"].str.strip()
    no_answer = answer.isin([NO_ANSWER, ""])
    scored_against = raw["category"].where(~(own & (raw["category"] == NO_ANSWER)), None)
    kinds = {subject: observer_kind(subject, subject_rt) for subject, subject_rt in rt.groupby(raw["subj"])}
    out = pd.DataFrame({
        "experiment": unquote(experiment) if own.all() else experiment,
        "observer": raw["subj"],
        "observer_kind": field("observer_kind", raw["subj"].map(kinds)),
        "session": raw["session"],
        "trial_index": trial.astype(int) - 1,
        "trial_id": field("trial_id", trial_ids),
        "role": raw["condition"].map(lambda c: decoded[c][4] if decoded[c] else "test"),
        "trial_type": raw["condition"].map(lambda c: decoded[c][3] if decoded[c] else UNTYPED),
        "condition": raw["condition"].map(lambda c: decoded[c][0] if decoded[c] else dataset),
        "level": raw["condition"].map(lambda c: decoded[c][1] if decoded[c] else raw_conditions.index(c)),
        "params": raw["condition"].map(lambda c: json.dumps(decoded[c][2] if decoded[c] else {"condition": c})),
        "category": field("category", raw["category"]),
        "texture_category": field("texture_category", raw["imagename"].map(texture_class)),
        "source_image": field("source_image", raw["imagename"].map(stimulus_name)),
        "imagename": raw["imagename"],
        "response": answer.where(~no_answer, ""),
        "correct_answer": scored_against,
        "correct": (answer == raw["category"]).astype("Int64").where(scored_against.notna(), pd.NA),
        "rt_ms": rt * 1000.0,
        "timed_out": no_answer.astype(int),
    })
    return conform(out, path)


OWN_NAME_TOKENS = ("number", "observer_kind", "condition", "level", "category", "trial_id", "stimulus")
"""The tokens of an image name written by ``cuebench export --format mvh`` (``cuebench.export.mvh_imagename``)."""


def own_name(imagename: str) -> dict | None:
    """The fields of a name written by cuebench's own export, every token percent-decoded: observer kind,
    class, trial id, source image and texture class (after the stimulus token's only literal ``-``);
    None for any other name (Geirhos et al.'s, model-vs-human's)."""
    tokens = Path(str(imagename)).stem.split("_")
    if len(tokens) != len(OWN_NAME_TOKENS) or not tokens[0].isdigit() or not tokens[5]:
        return None
    fields = dict(zip(OWN_NAME_TOKENS, tokens))
    shape, dash, texture = fields["stimulus"].partition("-")
    return {"observer_kind": unquote(fields["observer_kind"]), "category": unquote(fields["category"]) or None,
            "trial_id": unquote(fields["trial_id"]), "source_image": unquote(shape) or None,
            "texture_category": unquote(texture) if dash else None}


def decode_condition(value: str) -> tuple[str, int | None, dict, str, str] | None:
    """cuebench's own export writes ``[<role>@][<trial type>/]<condition>:<level>:<k>=<json>,...``
    (``cuebench.export.mvh_condition``, names and keys percent-encoded) -> (condition, level, params,
    trial type, role); None for any other raw value (a model-vs-human condition label)."""
    parts = value.split(":", 2)
    if len(parts) != 3 or not parts[0] or (parts[1] and not parts[1].lstrip("-").isdigit()):
        return None
    role, _, head = parts[0].rpartition("@")
    trial_type, _, condition = head.rpartition("/")
    params = decode_params(parts[2])
    if not condition or params is None:
        return None
    return (unquote(condition), int(parts[1]) if parts[1] else None, params, unquote(trial_type) or UNTYPED,
            unquote(role) or "test")


def decode_params(text: str) -> dict | None:
    """``k=<json>,k2=<json>`` -> dict, each value read as one JSON value (so a value may hold commas);
    None when the text is not of that form."""
    decoder, params, at = json.JSONDecoder(), {}, 0
    while at < len(text):
        key, eq, _ = text[at:].partition("=")
        if not eq or not key:
            return None
        try:
            value, end = decoder.raw_decode(text, at + len(key) + 1)
        except json.JSONDecodeError:
            return None
        params[unquote(key)] = value
        if end < len(text) and text[end] != ",":
            return None
        at = end + 1
    return params


def _natural_key(value: str):
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def params_of(value) -> dict:
    """A row's ``params`` (JSON text or dict) as a dict with lower-case names and common aliases unified
    (``grid_size``/``g`` -> ``grid``); {} when absent or not an object."""
    if isinstance(value, dict):
        raw = value
    elif isinstance(value, str) and value:
        try:
            raw = json.loads(value)
        except json.JSONDecodeError:
            return {}
    else:
        return {}
    return {PARAM_ALIASES.get(str(k).lower(), str(k).lower()): v for k, v in raw.items()} if isinstance(raw, dict) else {}


def has_posterior(column: pd.Series) -> pd.Series:
    """Rows whose ``adaptive`` column holds a QUEST+ posterior (a dict, or its JSON text; missing values of any
    dtype count as none)."""
    return column.map(lambda v: isinstance(v, dict) or (isinstance(v, str) and bool(v))).astype(bool)


def adaptive_rows(responses: pd.DataFrame) -> pd.Series:
    """True for the answers of adaptive (QUEST+) blocks: every runner stores them in session
    ``adaptive-<condition>`` (:func:`cuebench.adaptive.session_name`) with QUEST+'s posterior in ``adaptive``."""
    adaptive = pd.Series(False, index=responses.index)
    if "session" in responses:
        adaptive |= responses["session"].astype("string").str.startswith(SESSION_PREFIX).fillna(False).astype(bool)
    if "adaptive" in responses:
        adaptive |= has_posterior(responses["adaptive"])
    return adaptive


def fixed_level_rows(responses: pd.DataFrame) -> pd.DataFrame:
    """The rows of the fixed sequence, without those of adaptive blocks (:func:`adaptive_rows`): the one rule
    every fixed-level statistic follows (accuracy tables, t-tests, error consistency, noise ceilings, rank
    tests, psychometric fits, the sample-size plan). QUEST+ chooses an adaptive trial's level from the
    observer's previous answers and shows most trials near the threshold, so those answers are no sample of
    a level: counted, they would weight each level by the observer's own performance."""
    return responses[~adaptive_rows(responses)]
