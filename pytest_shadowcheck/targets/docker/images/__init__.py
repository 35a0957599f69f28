"""Local images for the docker target, built without any registry.

``python -m pytest_shadowcheck images build [postfix] [reference]``:

* ``base``: a Debian bookworm root made by ``debootstrap --variant=minbase``
  from the Debian mirror the host's apt already uses, turned into an image by
  ``docker import`` (tag ``shadowcheck/debian-base:HASH``);
* ``postfix``: Debian's Postfix 3.7 on that base (``recipes/postfix``);
* ``postfix-eatmydata``: the same with Debian's ``eatmydata`` (fsync a no-op), a
  negative control for power cuts (``recipes/postfix-eatmydata``);
* ``opensmtpd``: Debian's OpenSMTPD 6.8 on that base (``recipes/opensmtpd``);
* ``reference``: the reference MTA in a virtualenv on that base, installed
  from wheels built on the host (``pip wheel``; PyPI or the pip cache), so the
  image build itself fetches nothing but Debian packages.

Each image carries the label ``org.shadowcheck.recipe-hash``: a hash of its
recipe (every file of its directory but ``__pycache__`` and the target
descriptions whose ``recipe:`` is that directory), of the base's, and for
``reference`` of the sources it installs. A
build whose image with that hash exists is skipped; the docker target refuses
an image whose label does not match the current recipe.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "RECIPES",
    "Recipe",
    "RecipeError",
    "base_image",
    "build",
    "debian_mirrors",
    "describes",
    "hashed_files",
    "recipe_hash",
    "source_root",
    "user_recipe",
]

RECIPE_LABEL = "org.shadowcheck.recipe"
RECIPE_HASH_LABEL = "org.shadowcheck.recipe-hash"
LOCK = Path(tempfile.gettempdir()) / "shadowcheck-images.lock"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

#: the base root: what debootstrap makes (the hash covers it, not the mirror)
SUITE = "bookworm"
VARIANT = "minbase"
APT_SUITES = ("bookworm", "bookworm-updates")
SECURITY_SUITE = "bookworm-security"
BASE_RECIPE_VERSION = 1
BASE_REPOSITORY = "shadowcheck/debian-base"


@dataclass(frozen=True)
class Recipe:
    name: str
    image: str
    summary: str
    #: project files whose content the image depends on (relative to the source root)
    sources: tuple[str, ...] = ()
    #: a user's recipe: its directory (a bundled recipe is in the package)
    directory: Path | None = None


RECIPES = {
    "postfix": Recipe("postfix", "shadowcheck/postfix:3.7", "Debian's Postfix 3.7"),
    # a negative control: Postfix whose fsyncs do nothing (power cuts must lose mail)
    "postfix-eatmydata": Recipe(
        "postfix-eatmydata",
        "shadowcheck/postfix-eatmydata:3.7",
        "Debian's Postfix 3.7 with eatmydata (fsync a no-op): a negative control",
    ),
    "exim": Recipe("exim", "shadowcheck/exim:4.96", "Debian's Exim 4.96 (exim4-daemon-light)"),
    "opensmtpd": Recipe("opensmtpd", "shadowcheck/opensmtpd:6.8", "Debian's OpenSMTPD 6.8"),
    "reference": Recipe(
        "reference",
        "shadowcheck/reference:local",
        "the reference MTA (reference_impl) from this source tree",
        sources=("pyproject.toml", "reference_impl"),
    ),
}


class RecipeError(Exception):
    """A recipe cannot be hashed or built; the message says why and what to do."""


Log = Callable[[str], None]


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- hashing


def source_root() -> Path:
    """The project's source tree (an editable install or a clone)."""
    root = Path(__file__).resolve().parents[4]
    if not (root / "pyproject.toml").is_file() or not (root / "reference_impl").is_dir():
        raise RecipeError(
            f"no source tree at {root}: the reference image is built from a clone "
            "of pytest-shadowcheck (pip install -e .)"
        )
    return root


def _recipe_dir(recipe: Recipe) -> Path:
    if recipe.directory is not None:
        return recipe.directory
    recipes = resources.files("pytest_shadowcheck.targets.docker.images").joinpath("recipes")
    return Path(str(recipes.joinpath(recipe.name)))


def user_recipe(path: str | Path, image: str | None = None) -> Recipe:
    """A user's own recipe: a directory with a Dockerfile that builds ``FROM`` the base
    (``ARG BASE`` / ``FROM ${BASE}``, see :func:`base_image`). Its image is tagged
    ``image`` (default ``DIRECTORY-NAME:local``) and cached by the hash of the
    directory's files, like the bundled recipes."""
    directory = Path(path).resolve()
    if not (directory / "Dockerfile").is_file():
        raise RecipeError(
            f"recipe {path}: no Dockerfile in {directory} (a recipe is a directory whose "
            f"Dockerfile starts with ARG BASE and FROM ${{BASE}}: {base_image()})"
        )
    tag = image or f"{directory.name.lower()}:local"
    return Recipe(directory.name, tag, f"your recipe in {directory}", directory=directory)


def base_image() -> str:
    """The Debian base every recipe builds FROM (passed to ``docker build`` as BASE)."""
    return f"{BASE_REPOSITORY}:{base_hash()}"


def _files(root: Path, entries: tuple[str, ...]) -> Iterator[Path]:
    for entry in entries:
        path = root / entry
        if path.is_file():
            yield path
        else:
            for item in sorted(path.rglob("*")):
                if item.is_file() and "__pycache__" not in item.parts:
                    yield item


def base_hash() -> str:
    spec = [SUITE, VARIANT, APT_SUITES, SECURITY_SUITE, BASE_RECIPE_VERSION]
    return hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]


def describes(path: Path, directory: Path) -> bool:
    """Whether ``path`` is a target description whose ``recipe:`` is ``directory``: the
    harness reads it on the host, the image never uses it."""
    if path.suffix not in (".yaml", ".yml"):
        return False
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False  # not a description the target could load: the image may use it
    if not isinstance(data, dict) or "image" not in data or not data.get("recipe"):
        return False
    return (path.parent / str(data["recipe"])).resolve() == directory.resolve()


def hashed_files(recipe: Recipe) -> list[Path]:
    """The recipe's files its hash covers: every file of its directory (and below) but
    ``__pycache__`` and the target descriptions that name the directory as their recipe."""
    directory = _recipe_dir(recipe)
    return [
        path
        for path in sorted(directory.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and not describes(path, directory)
    ]


def recipe_hash(name: str | Recipe) -> str:
    """Hash of everything the recipe's image is made of (base, recipe files, sources)."""
    if isinstance(name, str) and name not in RECIPES:
        raise RecipeError(f"no recipe {name!r}; recipes: {', '.join(RECIPES)}")
    recipe = RECIPES[name] if isinstance(name, str) else name
    digest = hashlib.sha256(base_hash().encode())
    directory = _recipe_dir(recipe)
    for path in hashed_files(recipe):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes())
    if recipe.sources:
        root = source_root()
        for path in _files(root, recipe.sources):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------- Debian


def debian_mirrors(apt_dir: Path = Path("/etc/apt")) -> tuple[str, str | None]:
    """(main mirror, security mirror or None) from the host's apt sources."""
    main: str | None = None
    security: str | None = None
    files = sorted(apt_dir.glob("sources.list.d/*.sources")) + sorted(
        [apt_dir / "sources.list", *apt_dir.glob("sources.list.d/*.list")]
    )
    for path in files:
        with contextlib.suppress(OSError):
            text = path.read_text()
            entries: list[tuple[str, list[str]]] = []
            if path.suffix == ".sources":
                for stanza in re.split(r"\n\s*\n", text):
                    fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                    if fields.get("Enabled", "yes") != "no" and "URIs" in fields:
                        uris = fields["URIs"].split()
                        entries += [(u, fields.get("Suites", "").split()) for u in uris]
            else:
                for line in text.splitlines():
                    parts = re.sub(r"\[[^]]*\]", "", line).split()
                    if len(parts) >= 3 and parts[0] == "deb":
                        entries.append((parts[1], [parts[2]]))
            for uri, suites in entries:
                if SECURITY_SUITE in suites and security is None:
                    security = uri.rstrip("/")
                elif SUITE in suites and main is None:
                    main = uri.rstrip("/")
    return main or DEFAULT_MIRROR, security


def _sources(main: str, security: str | None) -> str:
    text = (
        f"Types: deb\nURIs: {main}\nSuites: {' '.join(APT_SUITES)}\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    if security:
        text += (
            f"\nTypes: deb\nURIs: {security}\nSuites: {SECURITY_SUITE}\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
    return text


def _run(command: list[str], log: Log, what: str) -> None:
    log(f"$ {' '.join(command)}")
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
        raise RecipeError(f"{what} failed (exit {result.returncode}):\n{tail}")


def _build_base(client: Any, tag: str, mirror: str | None, log: Log) -> None:
    if shutil.which("debootstrap") is None:
        raise RecipeError("debootstrap is not installed: apt-get install -y debootstrap")
    main, security = debian_mirrors()
    main = mirror or main
    with tempfile.TemporaryDirectory(prefix="shadowcheck-base-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "root"
        command = [
            "debootstrap",
            f"--variant={VARIANT}",
            "--components=main",
            SUITE,
            str(root),
            main,
        ]
        log(f"building the Debian base from {main} (about a minute)")
        _run(command, log, "debootstrap")
        (root / "etc/apt/sources.list").unlink(missing_ok=True)
        (root / "etc/apt/sources.list.d/debian.sources").write_text(_sources(main, security))
        (root / "etc/apt/apt.conf.d/90shadowcheck").write_text(
            'APT::Install-Recommends "false";\nAcquire::Languages "none";\n'
        )
        # no service starts while packages install in an image build
        policy = root / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (root / junk).glob("*"):
                if item.is_file():
                    item.unlink()
        archive = Path(tmp) / "root.tar"
        _run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(archive), "."], log, "tar")
        repository, _, version = tag.partition(":")
        log(f"docker import -> {tag}")
        client.api.import_image_from_file(
            str(archive), repository=repository, tag=version, changes=['CMD ["/bin/bash"]']
        )


# --------------------------------------------------------------------------- images


def _image_hash(client: Any, tag: str) -> str | None:
    from docker.errors import ImageNotFound

    try:
        image = client.images.get(tag)
    except ImageNotFound:
        return None
    return str((image.labels or {}).get(RECIPE_HASH_LABEL))


def _has(client: Any, tag: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(tag)
    except ImageNotFound:
        return False
    return True


def _wheels(into: Path, log: Log) -> None:
    """The project (only what the reference image runs) and its dependencies as wheels."""
    root = source_root()
    with tempfile.TemporaryDirectory(prefix="shadowcheck-src-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(root / name, src / name)
        shutil.copytree(
            root / "reference_impl", src / "reference_impl",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )  # fmt: skip
        log("pip wheel: the project and its dependencies (PyPI or the pip cache)")
        _run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
             "--wheel-dir", str(into), str(src)],
            log,
            "pip wheel",
        )  # fmt: skip


def _build_recipe(client: Any, recipe: Recipe, base_tag: str, digest: str, log: Log) -> None:
    from docker.errors import BuildError

    name = recipe.name
    with tempfile.TemporaryDirectory(prefix=f"shadowcheck-{name}-") as tmp:
        context = Path(tmp)
        shutil.copytree(_recipe_dir(recipe), context, dirs_exist_ok=True)
        if recipe.directory is None and name == "reference":
            _wheels(context / "wheels", log)
        log(f"docker build {recipe.image} (recipe {name}, hash {digest})")
        try:
            _, stream = client.images.build(
                path=str(context),
                tag=recipe.image,
                buildargs={"BASE": base_tag},
                labels={RECIPE_LABEL: name, RECIPE_HASH_LABEL: digest},
                network_mode="host",  # apt reaches the Debian mirror the host uses
                rm=True,
                forcerm=True,
                pull=False,
            )
        except BuildError as exc:
            lines = [str(c.get("stream", c.get("error", ""))).rstrip() for c in exc.build_log]
            tail = "\n".join(line for line in lines if line)[-3000:]
            raise RecipeError(f"docker build of {name} failed: {exc.msg}\n{tail}") from None
        for chunk in stream:
            text = str(chunk.get("stream", "")).rstrip()
            if text.startswith("Step "):
                log(f"  {text}")


def _covered(recipe: Recipe) -> str:
    """What a user's recipe hash covers, and the descriptions it leaves out."""
    directory = _recipe_dir(recipe)
    hashed = hashed_files(recipe)
    left = [p for p in sorted(directory.rglob("*")) if p.is_file() and describes(p, directory)]
    covered = ", ".join(str(p.relative_to(directory)) for p in hashed)
    text = f"{recipe.image}: the recipe hash covers {covered}"
    if left:
        names = ", ".join(str(p.relative_to(directory)) for p in left)
        text += f" (not {names}: target descriptions of this recipe, read on the host)"
    return text


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One build at a time on this machine (pytest-xdist workers, CI, people)."""
    with LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(
    names: list[str] | None = None,
    *,
    recipes: list[Recipe] | None = None,
    force: bool = False,
    mirror: str | None = None,
    client: Any = None,
    log: Log = _stderr,
) -> dict[str, str]:
    """Build the named bundled recipes and the given user ``recipes`` (default: every
    bundled one) and the base they need, skipping every image whose recipe hash is
    already built. Returns image -> 'built' / 'cached'."""
    from pytest_shadowcheck.targets.docker.support import docker_client

    wanted = [] if recipes and not names else (names or list(RECIPES))
    unknown = [n for n in wanted if n not in RECIPES]
    if unknown:
        raise RecipeError(f"no recipe {unknown[0]!r}; recipes: {', '.join(RECIPES)}")
    todo = [RECIPES[n] for n in wanted] + list(recipes or [])
    client = client or docker_client()
    outcome: dict[str, str] = {}
    with _locked():
        base_tag = base_image()
        for recipe in todo:
            digest = recipe_hash(recipe)
            if recipe.directory is not None:
                log(_covered(recipe))
            if not force and _image_hash(client, recipe.image) == digest:
                log(f"{recipe.image}: up to date (recipe hash {digest})")
                outcome[recipe.image] = "cached"
                continue
            if not _has(client, base_tag):
                _build_base(client, base_tag, mirror, log)
            _build_recipe(client, recipe, base_tag, digest, log)
            outcome[recipe.image] = "built"
    return outcome
