"""``python -m pytest_shadowcheck images``: build the local images of the docker target."""

from __future__ import annotations

import argparse
import sys

from pytest_shadowcheck.targets.base import TargetError
from pytest_shadowcheck.targets.docker.images import (
    RECIPES,
    RecipeError,
    base_image,
    build,
    recipe_hash,
    user_recipe,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_shadowcheck images",
        description="Build the docker target's images locally (debootstrap + docker import, "
        "then docker build); cached by recipe hash.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="build recipes (default: all), skipping built ones")
    make.add_argument("recipes", nargs="*", metavar="RECIPE", help=", ".join(RECIPES))
    make.add_argument(
        "--recipe",
        metavar="PATH",
        action="append",
        default=[],
        help="your own recipe: a directory whose Dockerfile builds FROM ${BASE} "
        f"(ARG BASE; the base is {base_image()}); repeatable",
    )
    make.add_argument(
        "--tag", help="image name of a --recipe (default: DIRECTORY-NAME:local)"
    )
    make.add_argument("--force", action="store_true", help="rebuild even when up to date")
    make.add_argument("--mirror", help="Debian mirror (default: the one apt uses here)")
    sub.add_parser("list", help="recipes, their images and current hashes")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            print(f"base       {base_image()}  (FROM this: ARG BASE / FROM ${{BASE}})")
            for name, recipe in RECIPES.items():
                try:
                    digest = recipe_hash(name)
                except RecipeError as exc:
                    digest = f"? ({exc})"
                print(f"{name:<10} {recipe.image:<30} {digest}  {recipe.summary}")
            return 0
        if args.tag and len(args.recipe) != 1:
            raise RecipeError("--tag names the image of one --recipe PATH")
        own = [user_recipe(path, args.tag) for path in args.recipe]
        outcome = build(args.recipes or None, recipes=own, force=args.force, mirror=args.mirror)
    except (RecipeError, TargetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for image, state in outcome.items():
        print(f"{image}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
