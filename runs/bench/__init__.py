"""dlsched.runs.bench: the benchmarks behind ``dlsched bench``, one module each.

Each reports ratios measured in one run against a reference (real time, an untracked run, one
job alone), never absolute targets: the machines they run on are shared and noisy.
"""
