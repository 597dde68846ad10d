"""Training hyperparameters, held to SB3's signatures and ranges before any training starts:
each bad one named with what was expected.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("algo", "hyperparams", "named"),
    [
        ("ppo", {"seed": 1}, "'seed' is set by dlsched (use --seed)"),
        ("ppo", {"gamma": 1.5}, "gamma=1.5 for PPO: expected a number in [0, 1]"),
        ("ppo", {"n_steps": 64.0}, "n_steps=64.0 (float) for PPO: expected a whole number"),
        ("ppo", {"normalize_advantage": 1}, "expected true or false"),
        ("sac", {"ent_coef": "auto_x"}, "ent_coef='auto_x' for SAC"),
        ("sac", {"train_freq": 0}, "train_freq=0 for SAC: expected a number >= 1"),
        ("td3", {"policy_delay": True}, "policy_delay=True (bool) for TD3"),
    ],
)
def test_hyperparameters_are_held_to_sb3s_signature_and_ranges(algo, hyperparams, named):
    from dlsched.policies.hyperparameters import hyperparameter_problems

    problems = hyperparameter_problems(algo, hyperparams)
    assert len(problems) == 1 and named in problems[0]


@pytest.mark.parametrize(
    "hyperparams",
    [{"learning_rate": 3e-4, "n_steps": 256, "batch_size": 256, "gamma": 0.95, "target_kl": None}],
)
def test_the_readmes_hyperparameters_pass(hyperparams):
    from dlsched.policies.hyperparameters import hyperparameter_problems

    assert hyperparameter_problems("ppo", hyperparams) == []
    assert hyperparameter_problems("sac", {"ent_coef": "auto_0.1", "gradient_steps": -1}) == []
