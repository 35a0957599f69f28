"""The checks: functions of the scenario and the history, never of the engine or a target.

Each expectation kind has a checker (:data:`.evaluate.CHECKERS`): the wire checks
(:mod:`.wire`) over what the proxies and sinks saw, the inside checks (:mod:`.inside`)
over what the MTA shows of itself; every run adds the no-loss (:mod:`.no_loss`) and
integrity (:mod:`.integrity`) invariants, and a workload its own checker
(:mod:`.workload`). They read the run through :mod:`.view`."""
