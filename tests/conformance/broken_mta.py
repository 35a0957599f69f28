"""Run one node of a deliberately broken reference MTA.

``python broken_mta.py VARIANT node --config ... --name ... --data ...``: the
same command line as ``python -m reference_impl``, with the variant's patch
applied first (see ``mta_variants``).
"""

from __future__ import annotations

import sys

from mta_variants import by_name

from reference_impl.cli import main

if __name__ == "__main__":
    variant = by_name(sys.argv[1])
    variant.apply()
    sys.exit(main(sys.argv[2:]))
