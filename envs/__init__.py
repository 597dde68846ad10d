"""dlsched.envs: environments, scenarios, backends and workloads.

Importing it registers the environments with Gymnasium::

    import gymnasium as gym
    import dlsched.envs  # noqa: F401

    env = gym.make("dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20")
"""

from gymnasium.envs.registration import register

register(id="dlsched/Inference-v0", entry_point="dlsched.envs.inference_env:InferenceEnv")
register(id="dlsched/Training-v0", entry_point="dlsched.envs.training_env:TrainingEnv")
