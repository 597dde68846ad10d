"""dlsched.runs.tracking: MLflow runs of evaluations and trainings, and reading them back.

- :mod:`.store`: which store, checked before anything runs;
- :mod:`.tracker`: the parent run of an evaluation and a child run per episode (each logged by
  :mod:`.episode_run`);
- :mod:`.run_logging`: the tags and the batched logging every run uses;
- :mod:`.tracked_evaluation`: an evaluation run and recorded as a user runs it;
- :mod:`.trajectory`: the local record of every episode, written before anything is tracked;
- :mod:`.plots`: the figures of an episode and of a comparison;
- :mod:`.stored_runs` and :mod:`.compare`: episodes read back and compared, scenario x policy;
- :mod:`.kvwriter`: SB3's logger into an MLflow run;
- :mod:`.provenance`: the dlsched version and commit recorded with every run.
"""
