"""What the ``influence-gbdt`` commands read and write: model files (each format checked to be
complete before its booster reads it), data tables (CSV, Parquet), JSON options and output paths.
Every failure is an :class:`~influence_gbdt.errors.InputError` with one line saying what to do."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

from ._ubjson import UBJSONError, object_keys
from .errors import InputError, booster_message, require

_PARQUET = (".parquet", ".pq")
#: Every command's ``--quiet``.
QUIET_HELP = "no progress bar and no notes on stderr (errors still print)"


def _check_lightgbm_file(path: Path) -> None:
    """Refuse a LightGBM model file that is not complete: LightGBM aborts or crashes the whole
    process on a truncated one (it reads each tree at the byte offsets the header's ``tree_sizes``
    promise, and a ``[key: value`` line cut in the parameters section is read past its end). A file
    cut after its trees would load, but without the training parameters (or the pandas categories)
    that follow them."""
    text = read_bytes(path).decode(errors="replace")
    trees_at, end_at = text.find("\nTree="), text.find("\nend of trees")
    sizes = re.search(r"^tree_sizes=(.*)$", text[: max(trees_at, 0)], re.MULTILINE)
    complete = text.startswith("tree\n") and 0 <= trees_at < end_at
    if complete and sizes:
        try:
            complete = sum(int(v) for v in sizes.group(1).split()) == end_at - trees_at
        except ValueError:
            complete = False
    params_at = text.find("\nparameters:\n", max(end_at, 0))
    params_end = text.find("\nend of parameters", max(params_at, 0))
    complete = complete and 0 <= params_at < params_end
    tail = text[params_end + len("\nend of parameters") :].strip() if complete else ""
    key = "pandas_categorical:"
    if tail.startswith(key):  # the last line the Python package writes: the categories, as JSON
        try:
            json.loads(tail[len(key) :].partition("\n")[0])
        except json.JSONDecodeError:
            complete = False
    elif tail and key.startswith(tail):  # cut inside that line's key
        complete = False
    if not complete:
        raise InputError(
            f"{path} is not a complete LightGBM model file (truncated or not written by "
            "Booster.save_model): save the model again."
        )


def load_model(path: str | Path) -> Any:
    """Load a model file written by a booster, choosing the library from its format.

    XGBoost ``.json`` / ``.ubj`` (training parameters are lost by the file: pass ``--params``),
    LightGBM ``.txt``, CatBoost ``.cbm`` / ``.json``.

    Raises
    ------
    InputError
        Missing, unreadable, truncated or unrecognised file.
    MissingDependencyError
        The booster that wrote it is not installed.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Model file {path} does not exist.")
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            head = json.loads(read_bytes(path))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"Model file {path} is not valid JSON ({exc}): save the model again.") from None
        except RecursionError:
            raise InputError(
                f"Model file {path} nests JSON too deeply to be a model: pass the file save_model wrote."
            ) from None
        head = head if isinstance(head, dict) else {}
        suffix = ".xgb" if "learner" in head else ".cbm-json" if "oblivious_trees" in head else ".unknown"
    if suffix == ".xgb":
        xgboost = require("xgboost", "xgboost", "Reading an XGBoost model file")
        return _load(path, "XGBoost", xgboost.core.XGBoostError,
                     lambda: xgboost.Booster(model_file=str(path)))
    if suffix == ".ubj":
        xgboost = require("xgboost", "xgboost", "Reading an XGBoost model file")
        document = bytearray(_ubjson_model(path))  # XGBoost reads these bytes, not the file again
        return _load(path, "XGBoost", xgboost.core.XGBoostError, lambda: xgboost.Booster(model_file=document))
    if suffix == ".txt":
        lightgbm = require("lightgbm", "lightgbm", "Reading a LightGBM model file")
        _check_lightgbm_file(path)
        return _load(path, "LightGBM", lightgbm.basic.LightGBMError,
                     lambda: lightgbm.Booster(model_file=str(path)))
    if suffix in (".cbm", ".cbm-json"):
        catboost = require("catboost", "catboost", "Reading a CatBoost model file")
        fmt = "json" if suffix == ".cbm-json" else "cbm"
        model = _load(path, "CatBoost", catboost.CatBoostError,
                      lambda: catboost.CatBoost().load_model(str(path), format=fmt))
        if str(model.get_all_params().get("loss_function", "")).startswith(("Poisson", "Tweedie")):
            # predicted as the CatBoostRegressor that wrote it predicts (exp of the margin, the
            # counts), as XGBoost's and LightGBM's files are; the generic class gives the margin
            return catboost.CatBoostRegressor().load_model(str(path), format=fmt)
        return model
    raise InputError(
        f"Cannot tell which booster wrote {path.name}: use XGBoost .json/.ubj, LightGBM .txt or "
        "CatBoost .cbm/.json."
    )


def read_bytes(path: Path, what: str = "model file") -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"Cannot read {what} {path}: {exc.strerror or exc}.") from None


def _ubjson_model(path: Path) -> bytes:
    """The bytes of an XGBoost ``.ubj`` file, checked to be one complete UBJSON document with the
    model's ``learner``: XGBoost's own reader crashes the process (SIGSEGV) on some truncated files."""
    data = read_bytes(path)
    try:
        keys = object_keys(data)
    except UBJSONError as exc:
        raise InputError(
            f"{path} is not a complete XGBoost UBJSON model file ({exc}): save the model again with "
            "Booster.save_model."
        ) from None
    if "learner" not in keys:
        raise InputError(
            f"{path} is a UBJSON document but no XGBoost model (its keys are {keys[:5]}, no 'learner'): "
            "pass the file Booster.save_model wrote."
        )
    return data


def _load(path: Path, library: str, error: type[Exception], load: Any) -> Any:
    try:
        return load()
    except (error, ValueError, OSError) as exc:
        raise InputError(f"{library} cannot read model file {path}: {booster_message(exc)}.") from None


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV or Parquet file with at least one data row."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Data file {path} does not exist.")
    try:
        if path.suffix.lower() in _PARQUET:
            require("pyarrow", "parquet", "Reading Parquet files")
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise InputError(f"Data file {path} is empty: it needs a header line and data rows.") from None
    except (ValueError, OSError, UnicodeDecodeError) as exc:  # pandas' ParserError, pyarrow's ArrowInvalid
        raise InputError(f"Cannot read data file {path}: {' '.join(str(exc).split())}") from None
    if frame.empty:
        raise InputError(f"Data file {path} has no data rows (only {list(frame.columns)[:10]}).")
    return frame


def write_table(frame: pd.DataFrame, path: str | Path) -> None:
    """Write a CSV or Parquet file (by extension, which :func:`check_output` checked)."""
    path = Path(path)
    try:
        if path.suffix.lower() in _PARQUET:
            frame.to_parquet(path, index=False)
        else:
            frame.to_csv(path, index=False)
    except OSError as exc:
        raise InputError(f"Cannot write {path}: {exc.strerror or exc}.") from None


def check_output(path: str | Path, flag: str = "-o", table: bool = True) -> None:
    """Refuse the output path given to ``flag`` that cannot be written (``table``: or is not a
    .csv, .parquet or .pq file), *before* any computing is done."""
    path = Path(path)
    if path.is_dir():
        example = path / ("scores.csv" if table else "plot.png")
        raise InputError(f"{flag} {path} is a directory: give a file name, e.g. {example}.")
    if not path.parent.is_dir():
        raise InputError(f"{flag} {path}: the directory {path.parent} does not exist.")
    if table and path.suffix.lower() not in (".csv", *_PARQUET):
        raise InputError(f"{flag} {path}: the table is written as CSV or Parquet, chosen by the file's "
                         f"extension; name it {path.stem}.csv, {path.stem}.parquet or {path.stem}.pq.")
    if path.suffix.lower() in _PARQUET:
        require("pyarrow", "parquet", "Writing Parquet files")
    existed = path.exists()
    try:
        with path.open("a"):
            pass
    except OSError as exc:
        raise InputError(f"Cannot write {flag} {path}: {exc.strerror or exc}.") from None
    if not existed:
        path.unlink()


def json_object(text: str, option: str, example: str) -> dict[str, Any]:
    """The JSON object ``text`` given to ``option`` (``example`` shows one in messages).

    Raises
    ------
    InputError
        Not valid JSON, not an object, a key given twice, or nested too deeply.
    """
    shown = text if len(text) <= 60 else text[:57] + "..."

    def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        twice = [key for key in keys if keys.count(key) > 1]
        if twice:
            raise InputError(f"{option} gives {twice[0]!r} twice: give each key once.")
        return dict(pairs)

    try:
        value = json.loads(text, object_pairs_hook=once)
    except json.JSONDecodeError as exc:
        raise InputError(f"{option} must be a JSON object such as {example}: {shown!r} is not valid JSON "
                         f"({exc}).") from None
    except RecursionError:
        raise InputError(f"{option} nests JSON too deeply: give a flat object such as {example}.") from None
    if not isinstance(value, dict):
        raise InputError(f"{option} must be a JSON object such as {example}, got {shown!r}.")
    return value
