"""What a target can do or show, and what each step and check needs of it.

A scenario names the capabilities it needs; the steps and checks imply more
(``STEP_CAPABILITY``, ``CHECK_CAPABILITY``); a target declares those it has. A scenario
that needs one its target lacks is UNTESTABLE, with ``CAPABILITY_NEED`` saying why.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CAPABILITIES",
    "CAPABILITY_NEED",
    "CHECK_CAPABILITY",
    "DEFAULT_FAULTS",
    "FAULT_KINDS",
    "LINK_FAULTS",
    "MTA_CAPABILITIES",
    "POINT_FAULTS",
    "POINT_PLACES",
    "POINT_VERBS",
    "PROCESS_CAPABILITIES",
    "QUEUE_PATHS",
    "STEP_CAPABILITY",
    "STORAGE_CAPABILITIES",
    "STORAGE_STEPS",
    "control_call",
]

#: what whoever runs the node processes can do to them (a target's own means)
PROCESS_CAPABILITIES = ("kill", "pause", "restart", "wipe_queue_db")
#: what whoever holds the node's queue directory can do to its disk: the directory on a
#: lazy filesystem (pytest_shadowcheck.storage) that loses what was not fsynced
STORAGE_CAPABILITIES = ("power_cut", "disk_faults")
#: what only the MTA itself can offer; a docker or external target claims them
MTA_CAPABILITIES = (
    "control_api",
    "virtual_clock",
    "set_settings",
    # the MTA marks each categorisation in the message (X-Categorized-By: NODE; DATE),
    # the only outside view of SN-11's "full categorisation on resubmission"
    "categoriser_stamp",
)
CAPABILITIES = PROCESS_CAPABILITIES + STORAGE_CAPABILITIES + MTA_CAPABILITIES

#: what each capability lets the harness do or see that the wire does not show; an
#: UNTESTABLE reason quotes it so an admin knows what their MTA would have to expose
CAPABILITY_NEED = {
    "kill": "kill a node abruptly (SIGKILL)",
    "pause": "freeze and thaw a node (SIGSTOP/SIGCONT)",
    "restart": "restart a node on the same queue database",
    "wipe_queue_db": "restart a node on a new, empty queue database",
    "power_cut": "cut a node's power: its processes die and whatever its queue directory "
    "held that was not fsynced is lost (a queue directory on a lazy filesystem)",
    "disk_faults": "make a node's queue disk full or failing (ENOSPC, EIO) and free it again",
    "control_api": "the MTA's internal state through a control API (queues, Safety Net "
    "contents, discard events, resubmission requests, directory, routes)",
    "virtual_clock": "a clock the harness can move by hours (hold times, expiry, the "
    "12-hour broadcast), internal time a black box does not expose",
    "set_settings": "change the MTA's settings while it runs",
    "categoriser_stamp": "a stamp in each message naming who categorised it, the only "
    "outside view of categorisation",
}

#: capability a step or expectation needs, derived so authors cannot forget one
STEP_CAPABILITY = {
    "kill": "kill",
    "pause": "pause",
    "resume": "pause",
    "restart": "restart",
    "wipe": "wipe_queue_db",
    "advance": "virtual_clock",
    "set_settings": "set_settings",
    "resubmit": "control_api",
    "directory": "control_api",
    "route": "control_api",
    "snapshot": "control_api",
    "power_cut": "power_cut",
    "disk_full": "disk_faults",
    "disk_error": "disk_faults",
    "disk_ok": "disk_faults",
}
#: steps that need every node's queue directory on a lazy filesystem
STORAGE_STEPS = frozenset({"power_cut", "disk_full", "disk_error", "disk_ok"})
CHECK_CAPABILITY = {"queue": "control_api", "config_warning": "control_api"}

#: fault kind -> the target capabilities it needs (link faults need only the proxies)
FAULT_KINDS: dict[str, tuple[str, ...]] = {
    "kill": ("kill", "restart"),
    "pause": ("pause",),
    "restart": ("restart",),
    "wipe": ("kill", "wipe_queue_db"),
    "cut": (),
    "blackhole": (),
    "delay": (),
    # only when named: a nemesis without a list of faults plays the ones above
    "power_cut": ("power_cut", "restart"),
    # the node stays up, its queue disk refuses writes (ENOSPC, EIO) for a while
    "disk_full": ("disk_faults",),
    "disk_error": ("disk_faults",),
    # only when named: a session of a link cut (or held) at a protocol point drawn
    # from the seed (engine/nemesis.py: NEMESIS_POINTS)
    "protocol": (),
}
#: faults that break a link (the others act on a node)
LINK_FAULTS = frozenset({"cut", "blackhole", "delay", "protocol"})

#: link faults that strike at a protocol point of a session (a ``fault`` step's kinds)
POINT_FAULTS = ("cut_at", "stall_at")
#: where a point fault strikes, relative to one command: after the client's command
#: went through; before the server's reply to it; inside that reply (half its last line
#: sent); after the whole reply went through
POINT_PLACES = ("after", "before_reply", "inside_reply", "after_reply")
#: the commands a point names: SMTP's, the shadow verbs, EOD (the final dot ending
#: DATA's content) and CONNECT (the server's greeting answers it; no "after")
POINT_VERBS = (
    "CONNECT", "EHLO", "HELO", "STARTTLS", "AUTH", "MAIL", "RCPT", "DATA", "EOD", "BDAT",
    "RSET", "NOOP", "VRFY", "QUIT", "XSHADOW", "XSHADOWCOPY", "XQDISCARD", "XRESUBMIT",
)  # fmt: skip
#: what a nemesis that names no faults plays
DEFAULT_FAULTS = ("kill", "pause", "restart", "wipe", "cut", "blackhole", "delay")

#: control API paths of the queues a ``queue`` check or ``snapshot`` step reads
QUEUE_PATHS = {
    "active": "/queues/active",
    "shadow": "/queues/shadow",
    "safetynet_primary": "/safetynet/primary",
    "safetynet_shadow": "/safetynet/shadow",
    "discard_events": "/discard-events",
    # not a queue: the configuration warnings a node flags (SN-6), as a snapshot reads them
    "config_warnings": "/config/warnings",
}


def control_call(kind: str, arg: Any) -> tuple[str, str] | None:
    """The control API call (method, path) a step or check of ``kind`` makes, when it
    makes one call a target could answer without the whole control API (an admin
    adapter: a queue listing, a re-rendered route); None for anything else. ``arg``: a
    check's arguments (a mapping), or a step's spec (scenario/steps.py)."""
    if kind in ("queue", "snapshot"):
        queue = arg.get("queue") if isinstance(arg, dict) else getattr(arg, "queue", None)
        path = QUEUE_PATHS.get(str(queue))
        return ("GET", path) if path else None
    if kind == "route":
        return ("PUT", "/topology/next_hops")
    if kind == "config_warning":
        return ("GET", "/config/warnings")
    return None
