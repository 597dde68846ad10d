"""The files of a saved model, found and measured before anything reads them, and a model saved
before models were data refused.

A model folder (:mod:`dlsched.policies.learned`) is read into memory whole: SB3 unpacks the
members of ``model.zip`` (its ``data`` JSON, every ``.pth``), and the card and the statistics
are read as they are. A zip declares each member's unpacked size in its table of contents, so a
file of a megabyte can declare gigabytes (a zip bomb). :func:`model_files` therefore measures
before it reads: the size the table of contents takes, then the members' count and declared
sizes with the other files' sizes, each against a
:class:`~dlsched.envs.size_bounds.SizeBound` that its environment variable raises; only then
is every member read once for its checksum, which unpacks no more than the member declares
(:mod:`zipfile` stops there).

A model folder of dlsched 0.1.0 kept its normalisation statistics as a pickle
(:data:`PICKLED_NORMALIZER_FILE`) and its card (format 3 or earlier) did not record what the
archive's pickled entries hold; loading one would run whatever code its pickles name.
:func:`refuse_pickled_model` refuses it, naming the command that converts it once
(``dlsched models convert``, :mod:`dlsched.policies.conversion`).

This module imports neither torch nor SB3, so that a refusal comes before they are loaded.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from dlsched.envs.errors import DlschedError, ModelError, PolicyError
from dlsched.envs.size_bounds import SizeBound

MODEL_FILE = "model.zip"
#: The observation statistics, JSON (:mod:`dlsched.policies.normalization`).
NORMALIZER_FILE = "normalizer.json"
#: Where dlsched 0.1.0 kept them, as SB3's ``VecNormalize`` pickle: never read but to convert.
PICKLED_NORMALIZER_FILE = "vec_normalize.pkl"
CARD_FILE = "dlsched-model.json"
#: The first model card format whose folder loads without unpickling anything: it records the
#: network and the values of the archive's pickled entries, beside statistics in JSON.
DATA_CARD_FORMAT = 4
#: The command that converts a model saved before :data:`DATA_CARD_FORMAT`.
CONVERT_COMMAND = "dlsched models convert"
#: The URIs of a model in an MLflow store (:mod:`dlsched.runs.tracking.model_uris`), which
#: the command converts into a folder of its own.
STORED_MODEL_SCHEMES: tuple[str, ...] = ("runs:/", "models:/")
#: The file that makes a folder an MLflow Model (:mod:`dlsched.policies.mlflow_model`).
MLMODEL_FILE = "MLmodel"
#: The model folder's key among an MLflow Model's artifacts (``artifacts/policy/``).
POLICY_ARTIFACT = "policy"
#: What SB3's ``save`` writes into a model's zip; a zip without these is no SB3 model.
SB3_ZIP_ENTRIES: tuple[str, ...] = ("data", "policy.pth")

MAX_MODEL_BYTES = SizeBound("MAX_MODEL_BYTES", 32 << 20, "bytes of a model's files once unpacked")
"""What loading a model reads into memory: the members of ``model.zip`` as they declare
themselves unpacked, the card and the statistics. A model ``dlsched train`` writes takes well
under a megabyte (``docs/limits.md``); loading one at the limit stays within a few hundred
megabytes (SB3 holds the ``data`` JSON twice as it parses it)."""
MAX_MODEL_MEMBERS = SizeBound("MAX_MODEL_MEMBERS", 64, "members in a model.zip")
"""Members of ``model.zip``: SB3 writes six."""
#: Bytes of the table of contents per member a zip may have: an entry takes 46 bytes and its
#: name (SB3's are short), so a larger table holds more members than the limit, or padding.
TABLE_BYTES_PER_MEMBER = 1024

_END_SIGNATURE = b"PK\x05\x06"
#: The end record: its signature, four counts of two bytes, the table's size and offset, and the
#: comment's length; the comment (at most 65,535 bytes) follows it at the end of the file.
_END_RECORD = struct.Struct("<4s4H2LH")
_LONGEST_COMMENT = 0xFFFF


@dataclass(frozen=True)
class ModelFiles:
    """The files of one model folder, measured within their limits.

    Attributes:
        model: the SB3 model (``model.zip``).
        card: its card, beside it.
        normalizer: its observation statistics, beside it (``None``: trained without).
        pickled_normalizer: the statistics of a model saved by dlsched 0.1.0, beside it
            (:data:`PICKLED_NORMALIZER_FILE`; ``None``: none), read only to convert it.
    """

    model: Path
    card: Path
    normalizer: Path | None
    pickled_normalizer: Path | None = None


def model_files(path: Path) -> ModelFiles:
    """The files of the model at ``path``, refused unless whole and within their limits.

    Args:
        path: a model folder, its ``model.zip``, or the MLflow Model holding one.

    Raises:
        PolicyError: no model there.
        ModelError: no card beside it, a ``model.zip`` that is not an SB3 model's whole zip, or
            files above :data:`MAX_MODEL_BYTES` or :data:`MAX_MODEL_MEMBERS`.
    """
    inner = path / "artifacts" / POLICY_ARTIFACT
    if (path / MLMODEL_FILE).is_file() and inner.is_dir():
        path = inner
    folder = path if path.is_dir() else path.parent
    model = folder / MODEL_FILE if path.is_dir() else path
    if not model.is_file():
        raise PolicyError(
            f"no model at {str(model)!r}; expected a {MODEL_FILE} written by `dlsched train` "
            "(or the folder holding it)"
        )
    card = folder / CARD_FILE
    if not card.is_file():
        raise ModelError(
            f"model {str(model)!r} has no {CARD_FILE} beside it; the card holds the "
            "observation layout the model was trained on, and a model is not used without it "
            "(copy the whole model folder that `dlsched train` wrote)"
        )
    normalizer, pickled = folder / NORMALIZER_FILE, folder / PICKLED_NORMALIZER_FILE
    files = ModelFiles(
        model,
        card,
        normalizer if normalizer.exists() else None,
        pickled if pickled.exists() else None,
    )
    read = (files.card, files.normalizer, files.pickled_normalizer)
    beside = [file for file in read if file is not None]
    _check_zip(model, [(file.name, file.stat().st_size) for file in beside])
    return files


def refuse_pickled_model(files: ModelFiles, source: str) -> None:
    """Refuse a model saved before models were data (its card's format is below
    :data:`DATA_CARD_FORMAT`), in one line naming the command that converts it.

    A card that is not a JSON object with a whole-number format is left to the card's reader
    (:meth:`~dlsched.policies.learned.ModelCard.from_json`) to refuse, with its reason.

    Args:
        files: the model's files, measured.
        source: the model as the user named it (a path, or a ``runs:/`` or ``models:/`` URI,
            which the command converts into a folder of its own: ``--output``).

    Raises:
        ModelError: the model was saved before models were data.
    """
    try:
        version = int(json.loads(files.card.read_text(encoding="utf-8"))["format"])
    except (OSError, UnicodeDecodeError, KeyError, TypeError, ValueError):
        return
    if version >= DATA_CARD_FORMAT:
        return
    pickled = (
        f" and its statistics are a pickle, {PICKLED_NORMALIZER_FILE}"
        if files.pickled_normalizer is not None
        else ""
    )
    output = " --output DIR" if source.startswith(STORED_MODEL_SCHEMES) else ""
    raise ModelError(
        f"model {source!r} was saved by an earlier dlsched (card format {version}{pickled}); "
        "loading it would unpickle its files, which can run any code, so dlsched no longer "
        f"does: if you trust where it came from, convert it once with `{CONVERT_COMMAND} "
        f"{source} --trust-pickle{output}`"
    )


def _check_zip(path: Path, beside: list[tuple[str, int]]) -> None:
    """Refuse a file that is not the whole zip of an SB3 model within the limits, ``beside``
    the sizes of the files read with it, before SB3 reads it."""
    try:
        table = _table_bytes(path)
        if table is not None and table > MAX_MODEL_MEMBERS.value * TABLE_BYTES_PER_MEMBER:
            raise ModelError(
                f"model {str(path)!r}: its table of contents takes {table:,} bytes, room for "
                f"more members than expected: {MAX_MODEL_MEMBERS.expected()}"
            )
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if MAX_MODEL_MEMBERS.exceeded(len(members)):
                raise ModelError(
                    f"model {str(path)!r} is a zip of {len(members):,} members: expected "
                    f"{MAX_MODEL_MEMBERS.expected()}"
                )
            _check_unpacked_size(path, [(m.filename, m.file_size) for m in members], beside)
            missing = [name for name in SB3_ZIP_ENTRIES if name not in archive.namelist()]
            if missing:
                raise not_a_model(path, f"a zip without {', '.join(missing)}")
            damaged = archive.testzip()  # reads every member and checks its CRC
    except DlschedError:  # a refusal above, or a limit's variable that is not a number
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
        raise not_a_model(path, f"not a whole zip file ({error})") from error
    if damaged is not None:
        raise not_a_model(path, f"the zip's entry {damaged!r} is damaged")


def _table_bytes(path: Path) -> int | None:
    """The size of the zip's table of contents as its end record declares it (``None``: no end
    record, which :class:`zipfile.ZipFile` refuses), read before the table is."""
    with path.open("rb") as stream:
        size = stream.seek(0, os.SEEK_END)
        tail = min(size, _END_RECORD.size + _LONGEST_COMMENT)
        stream.seek(size - tail)
        end = stream.read(tail)
    at = end.rfind(_END_SIGNATURE)
    if at < 0 or len(end) - at < _END_RECORD.size:
        return None
    table: int = _END_RECORD.unpack_from(end, at)[5]
    return table


def _check_unpacked_size(
    path: Path, members: list[tuple[str, int]], beside: list[tuple[str, int]]
) -> None:
    """Refuse a model whose members (``(name, size)`` as declared) and the files ``beside`` it
    add up to more than :data:`MAX_MODEL_BYTES`, naming the largest."""
    total = sum(size for _, size in (*members, *beside))
    if MAX_MODEL_BYTES.exceeded(total):
        name, size = max((*members, *beside), key=lambda item: item[1])
        where = "its member" if (name, size) in members else "the file beside it"
        raise ModelError(
            f"model {str(path)!r} would unpack into {total:,} bytes with the files beside it "
            f"({where} {name!r} alone declares {size:,}): expected {MAX_MODEL_BYTES.expected()}"
        )


def not_a_model(path: Path, reason: str) -> ModelError:
    """The refusal of ``path`` as no model ``dlsched train`` wrote, for ``reason``."""
    return ModelError(
        f"{str(path)!r} is not a dlsched model: {reason}; expected the {MODEL_FILE} that "
        "`dlsched train` writes (copy the whole model folder, or download it again)"
    )
