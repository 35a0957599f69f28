"""Targets: how the harness runs (or reaches) the nodes of the system under test.

The interface is :mod:`.base` (also importable from :mod:`pytest_shadowcheck` itself, the
documented place for target authors); the built-in targets are :mod:`.reference`,
:mod:`.external` and :mod:`.docker`, found through :mod:`.registry` and the hooks of
:mod:`.hookspecs`; :mod:`.fit` says whether a target can run a scenario at all."""
