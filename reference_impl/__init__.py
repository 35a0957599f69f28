"""The reference MTA: a real multi-node SMTP transport with shadow redundancy and Safety Net.

Run ``python -m reference_impl cluster CLUSTER.yaml --data DIR`` for a whole
boundary, or ``python -m reference_impl node ...`` for one node. See
``docs/protocol.md`` for the wire protocol and ``openapi.yaml`` for the
control API.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
