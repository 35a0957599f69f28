"""Credentials of one cluster run: the peers' secret and the control API token.

There is no built-in secret. What the cluster file does not give is made at
random, once per cluster run, and written to a credentials file that every
node of the run reads (``<cluster file>.credentials.json`` unless
``--credentials`` names another; the ``cluster`` command writes a fresh one
in its data directory at each start). The file is created atomically with
mode 0600, so nodes started together agree on it, and a node restarted later
in the same run finds the same values.

Peers never send the secret itself: each node authenticates with a password
derived from the secret and its own node name (:func:`node_password`), so a
credential seen on one link is good for that node name only.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from .config import ClusterConfig, ConfigError


@dataclass(frozen=True)
class Credentials:
    secret: str
    #: None: the control API takes no token, and then listens on loopback only
    token: str | None


def default_path(config_path: Path) -> Path:
    return config_path.with_name(config_path.name + ".credentials.json")


def node_password(secret: str, node: str) -> str:
    """The AUTH PLAIN password of ``node``: bound to its name, useless for another."""
    label = b"shadowcheck-node:" + node.encode()
    return hmac.new(secret.encode(), label, hashlib.sha256).hexdigest()


def _fresh(cluster: ClusterConfig) -> dict[str, str]:
    return {
        "secret": cluster.secret or secrets.token_urlsafe(32),
        "token": secrets.token_urlsafe(32),
    }


def write_fresh(path: Path, cluster: ClusterConfig) -> None:
    """New credentials for a new cluster run, replacing any of an earlier run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    _write_private(temp, _fresh(cluster))
    os.replace(temp, path)


def _write_private(path: Path, values: dict[str, str]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(values, out)
        out.flush()
        os.fsync(out.fileno())


def _load_or_create(path: Path, cluster: ClusterConfig) -> dict[str, str]:
    if not path.exists():
        temp = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            _write_private(temp, _fresh(cluster))
            # link() fails if another node of the run created it first: theirs wins.
            with contextlib.suppress(FileExistsError):
                os.link(temp, path)
        except OSError as exc:
            raise ConfigError(
                f"cannot write the cluster's credentials to {path} ({exc.strerror}): give "
                "--credentials PATH in a writable place, or put secret: and control_token: "
                "in the cluster file"
            ) from None
        finally:
            with contextlib.suppress(OSError):
                temp.unlink()
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path}: not a credentials file ({exc}); delete it to make a new one"
        ) from None
    if not isinstance(values, dict) or not all(
        isinstance(values.get(k), str) and values[k] for k in ("secret", "token")
    ):
        raise ConfigError(f"{path}: needs a secret and a token; delete it to make a new one")
    return values


def resolve(cluster: ClusterConfig, path: Path) -> Credentials:
    """The run's credentials: the cluster file's own values first, then the file's."""
    needs_file = not cluster.secret or cluster.control_token is None
    stored = _load_or_create(path, cluster) if needs_file else {}
    secret = cluster.secret or stored["secret"]
    if cluster.control_token is None:
        token: str | None = stored["token"]
    else:
        token = cluster.control_token or None  # "": explicitly none
    return Credentials(secret=secret, token=token)
