"""``python -m pytest_shadowcheck.images``: build the local images of the docker target."""

from __future__ import annotations

import argparse
import sys

from ..targets.base import TargetError
from . import RECIPES, RecipeError, base_hash, build, recipe_hash


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_shadowcheck.images",
        description="Build the docker target's images locally (debootstrap + docker import, "
        "then docker build); cached by recipe hash.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="build recipes (default: all), skipping built ones")
    make.add_argument("recipes", nargs="*", metavar="RECIPE", help=", ".join(RECIPES))
    make.add_argument("--force", action="store_true", help="rebuild even when up to date")
    make.add_argument("--mirror", help="Debian mirror (default: the one apt uses here)")
    sub.add_parser("list", help="recipes, their images and current hashes")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            print(f"base       shadowcheck/debian-base:{base_hash()}")
            for name, recipe in RECIPES.items():
                try:
                    digest = recipe_hash(name)
                except RecipeError as exc:
                    digest = f"? ({exc})"
                print(f"{name:<10} {recipe.image:<30} {digest}  {recipe.summary}")
            return 0
        outcome = build(args.recipes or None, force=args.force, mirror=args.mirror)
    except (RecipeError, TargetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, state in outcome.items():
        print(f"{RECIPES[name].image}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
