"""A trained scheduler as an MLflow Model: the ``python_function`` flavour around a model folder.

``dlsched train`` logs its best model as an MLflow Model (``runs:/<run_id>/model``), so that
MLflow's own tools take it: ``mlflow.pyfunc.load_model`` predicts limits from observations, the
Model Registry registers it (``dlsched train --register-as NAME``, then ``models:/NAME/1``), and
``dlsched evaluate --policy`` loads it as a :class:`~dlsched.policies.learned.LearnedPolicy`. The
layout is MLflow's::

    model/
      MLmodel                 the flavour, the signature, the Python and package versions
      dlsched_policy_model.py :class:`PolicyModel`, as MLflow's "models from code" (no pickle)
      artifacts/policy/       the folder :func:`~dlsched.policies.learned.save_model` wrote:
        model.zip             the SB3 model
        normalizer.json       its observation statistics
        dlsched-model.json    its card (layout, frame stack, action mapping, network)
      requirements.txt, python_env.yaml, conda.yaml

The signature is the observation a model reads (``float32 (-1, slots, features)``, the
environment's ``observation_space`` with a batch axis), the limits it sets (``float32 (-1,
slots)``, fractions of a worker), and the parameter ``slots_per_worker``, which splits the slots
into workers (by default the layout it was trained on, or the one enclosing all it was trained
on). The slots are ``-1`` for a model that
acts on any layout of its features (the slot network), the trained layout's for any other.
``predict`` treats each row of a batch as the first step of an episode (with frame stacking, the
observation stands for the frames before it too): a stateless service has no episode. To run a
model through episodes, load it as a policy (:func:`dlsched.runs.resolve_policy`) and step an
environment with it.

Nothing in the folder is a pickle. The two loaders differ in what they run:
``dlsched evaluate --policy runs:/...`` (:func:`dlsched.runs.resolve_policy`) downloads the
files and reads ``artifacts/policy/`` as data (:func:`~dlsched.policies.learned.load_model`),
never running ``dlsched_policy_model.py``; ``mlflow.pyfunc.load_model`` runs that script, as it
runs the code of any model from code, so use it on models whose origin you trust
(``docs/security.md``).
"""

from __future__ import annotations

import importlib.metadata
import shutil
import tempfile
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
from mlflow.models import ModelSignature
from mlflow.pyfunc.model import PythonModel
from mlflow.types import ParamSchema, ParamSpec, Schema, TensorSpec

from dlsched.envs.errors import PolicyError
from dlsched.envs.observation import ObservationLayout
from dlsched.policies.learned import LearnedPolicy, load_model
from dlsched.policies.model_files import MLMODEL_FILE, POLICY_ARTIFACT

#: The name of the signature's input tensor.
OBSERVATION = "observation"
#: The name of the signature's parameter that splits the slots into workers.
SLOTS_PER_WORKER = "slots_per_worker"
#: The script MLflow loads the model from (MLflow's "models from code").
MODEL_CODE_FILE = "dlsched_policy_model.py"
_MODEL_CODE = """\
from mlflow.models import set_model

from dlsched.policies.mlflow_model import PolicyModel

set_model(PolicyModel())
"""
#: The distributions a loaded model needs, pinned to the versions that trained it.
_REQUIREMENTS = ("stable-baselines3", "torch", "gymnasium", "numpy", "mlflow")


class PolicyModel(PythonModel):
    """The ``python_function`` face of a trained dlsched model: observations in, limits out."""

    def __init__(self) -> None:
        self.policy: LearnedPolicy | None = None

    def load_context(self, context: Any) -> None:
        """Load the model folder MLflow unpacked beside the ``MLmodel`` file."""
        self.policy = load_model(Path(context.artifacts[POLICY_ARTIFACT]))

    # np.ndarray is a hint MLflow takes without inferring a schema from it (the signature logged
    # with the model is the schema); Any or none at all make it warn at class definition
    def predict(self, context: Any, model_input: np.ndarray, params: Any = None) -> np.ndarray:
        """Limits ``(n, slots)`` for observations ``(n, slots, features)`` (or one ``(slots,
        features)``), each taken as an episode's first step; ``params`` may give
        ``slots_per_worker``, the slots of each worker (MLflow fills in the signature's
        default, the model's own layout's:
        :attr:`~dlsched.policies.learned.ModelCard.input_layout`).

        Raises:
            PolicyError: ``slots_per_worker`` does not divide the slots into workers.
        """
        policy = self.policy
        assert policy is not None, "load_context was not called"
        # the signature names its tensor, so MLflow hands it over as {"observation": array}
        observations = np.asarray(
            model_input[OBSERVATION] if isinstance(model_input, dict) else model_input,
            dtype=np.float32,
        )
        trained = policy.card.input_layout
        slots_per_worker = int((params or {}).get(SLOTS_PER_WORKER, trained.slots_per_worker))
        slots = observations.shape[-2] if observations.ndim >= 2 else 0
        if slots_per_worker < 1 or slots % slots_per_worker:
            raise PolicyError(
                f"{SLOTS_PER_WORKER}={slots_per_worker} does not divide the observation's "
                f"{slots} slots into workers; pass params={{'{SLOTS_PER_WORKER}': n}} with the "
                "slots of each worker"
            )
        policy.use_layout(
            ObservationLayout(slots // slots_per_worker, slots_per_worker, trained.features)
        )
        policy.reset()
        limits, _ = policy.predict(observations)
        return np.asarray(limits, dtype=np.float32)


def signature(policy: LearnedPolicy) -> ModelSignature:
    """The model's signature: observations in, one limit per slot out, and the slots per
    worker; the slots are ``-1`` where the model acts on any layout."""
    trained = policy.card.input_layout
    slots = -1 if policy.any_layout else trained.shape[0]
    return ModelSignature(
        inputs=Schema(
            [TensorSpec(np.dtype(np.float32), (-1, slots, len(trained.features)), OBSERVATION)]
        ),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, slots), "limits")]),
        params=ParamSchema([ParamSpec(SLOTS_PER_WORKER, "long", trained.slots_per_worker)]),
    )


def _requirements() -> list[str]:
    pinned = []
    for name in _REQUIREMENTS:
        try:
            pinned.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pinned.append(name)
    return [*pinned, "dlsched"]


def save_mlflow_model(model_folder: Path, destination: Path) -> Path:
    """Write the MLflow Model of a model folder to ``destination``, unless it is there already.

    Args:
        model_folder: the folder :func:`~dlsched.policies.learned.save_model` wrote.
        destination: the MLflow Model's folder, logged as the run's ``model`` artifact.

    Returns:
        ``destination``.
    """
    if (destination / MLMODEL_FILE).is_file():
        return destination
    policy = load_model(model_folder)
    with tempfile.TemporaryDirectory(prefix="dlsched-mlflow-model-") as scratch:
        # MLflow copies an artifact folder under its own name: stage it as artifacts/policy/
        staged = Path(scratch) / POLICY_ARTIFACT
        shutil.copytree(model_folder, staged)
        # a model from code (a two-line script naming PolicyModel), not a pickled object
        code = Path(scratch) / MODEL_CODE_FILE
        code.write_text(_MODEL_CODE, encoding="utf-8")
        mlflow.pyfunc.save_model(
            str(destination),
            python_model=str(code),
            artifacts={POLICY_ARTIFACT: str(staged)},
            signature=signature(policy),
            input_example=np.zeros((1, *policy.card.input_layout.shape), dtype=np.float32),
            # given, so that MLflow does not load the model in a subprocess to infer them
            pip_requirements=_requirements(),
        )
    return destination
