"""dlsched.runs.commands: one module per ``dlsched`` subcommand.

A command module parses its arguments and prints; the work it asks for is done by a library
module of :mod:`dlsched.runs` that a Python user can import as well.
"""
