"""``dlsched models convert``: a model saved by dlsched 0.1.0, named as ``--policy`` names one
(its folder or ``model.zip``, a ``runs:/`` or ``models:/`` URI), converted into a folder that
loads without unpickling (:mod:`dlsched.policies.conversion`, which says what it does and why it
needs the caller's trust).

A model in an MLflow store is downloaded to a temporary folder and converted into ``output``;
the store is only read.
"""

from __future__ import annotations

from pathlib import Path

from dlsched.envs.errors import PolicyError
from dlsched.policies.conversion import Conversion, convert_model, refuse_untrusted
from dlsched.runs.policy_specs import downloaded_model, model_path, model_store
from dlsched.runs.tracking.model_uris import is_mlflow_uri, parse_model_uri


def convert(
    spec: str, output: Path | None, trust_pickle: bool, tracking_uri: str | None = None
) -> Conversion:
    """Convert the model ``spec`` names.

    Args:
        spec: a model folder or its ``model.zip``, or a ``runs:/`` or ``models:/`` URI.
        output: the folder to write the converted model to, which must not exist; ``None``:
            convert a folder in place (a model in a store needs one).
        trust_pickle: the caller trusts the model's origin (converting unpickles it).
        tracking_uri: the MLflow store of a URI; by default the one ``dlsched evaluate`` uses.

    Raises:
        PolicyError: no ``trust_pickle``, a stored model without ``output``, or no model there.
        ModelError: the model cannot be converted (:func:`~dlsched.policies.conversion.
            convert_model`).
    """
    refuse_untrusted(spec, trust_pickle)  # before a store is opened or anything downloaded
    if not is_mlflow_uri(spec):
        return convert_model(model_path(spec), output, trust_pickle)
    if output is None:
        raise PolicyError(
            f"model {spec!r} is in an MLflow store, which dlsched only reads: give --output DIR, "
            "the folder to write the converted model to"
        )
    model = parse_model_uri(spec)
    with downloaded_model(model, model_store(tracking_uri)) as local:
        return convert_model(local, output, trust_pickle)
