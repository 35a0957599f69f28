"""The engine: runs one scenario against a target and records everything in a history.

The run (:mod:`.run`) starts the sinks and fault proxies and has the target start the
nodes, carries out the steps (each kind by its handler in :mod:`.steps`' ``STEPS``; raw
SMTP sessions in :mod:`.session`, workloads in :mod:`.workload` with their traffic in
:mod:`.traffic` and faults in :mod:`.nemesis`), then hands the history to the checks.
Steps see the run through :mod:`.context`."""
