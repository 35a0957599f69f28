"""A user recipe's hash: what the image is made of, never the description beside it.

No Docker engine needed: the hash is of files on disk (and the base's recipe).
"""

from __future__ import annotations

from pathlib import Path

from pytest_shadowcheck.targets.docker.description import load_description
from pytest_shadowcheck.targets.docker.images import hashed_files, recipe_hash, user_recipe

DOCKERFILE = "ARG BASE\nFROM ${BASE}\nCOPY mymta.conf /etc/mymta.conf\n"
DESCRIPTION = """\
name: mymta
image: mymta:4.2
recipe: .
files:
  /etc/mymta/{{ node }}.conf: "listen {{ listen_host }}:{{ smtp_port }}"
"""


def test_editing_the_description_in_the_recipe_keeps_the_hash(tmp_path: Path) -> None:
    recipe = tmp_path / "mymta"
    recipe.mkdir()
    (recipe / "Dockerfile").write_text(DOCKERFILE)
    (recipe / "mymta.conf").write_text("queue /var/spool/mymta\n")
    description = recipe / "mymta.yaml"
    description.write_text(DESCRIPTION)
    # a YAML file the image uses is no description of the recipe: it counts
    (recipe / "routes.yaml").write_text("routes: {corp.test: 127.0.0.1}\n")
    # the description the target loads names this very directory as its recipe
    loaded = load_description(description)
    assert (loaded.path.parent / str(loaded.recipe)).resolve() == recipe.resolve()
    mine = user_recipe(recipe, "mymta:4.2")
    assert [p.name for p in hashed_files(mine)] == ["Dockerfile", "mymta.conf", "routes.yaml"]
    before = recipe_hash(mine)

    description.write_text(DESCRIPTION + "max_nodes: 4\n")
    assert recipe_hash(mine) == before
    # a description elsewhere naming the recipe by another path is left out as well
    (recipe / "sub").mkdir()
    (recipe / "sub" / "other.yaml").write_text("image: mymta:4.2\nrecipe: ..\n")
    assert recipe_hash(mine) == before

    (recipe / "mymta.conf").write_text("queue /var/spool/mymta2\n")  # COPYd by the Dockerfile
    changed = recipe_hash(mine)
    assert changed != before
    (recipe / "routes.yaml").write_text("routes: {corp.test: 127.0.0.2}\n")
    assert recipe_hash(mine) != changed
