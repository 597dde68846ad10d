"""dlsched.runs.training: train learned schedulers with Stable-Baselines3.

- :mod:`.harness`: one training run (:func:`~.harness.train`), validated and tracked;
- :mod:`.environments`: the vectorised environments an agent trains in;
- :mod:`.callbacks`: progress, rollout QoE, validation with early stopping;
- :mod:`.slot_agents`: every slot an agent of one shared policy;
- :mod:`.settings_text`: settings written as text (layer widths, ``KEY=VALUE`` arguments);
- :mod:`.summary`: a finished training in words.
"""
