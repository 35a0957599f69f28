"""SN-10: a Shadow Safety Net copy holds only the original envelope recipients - judged on
the redeliveries by another node than its primary, after a resubmission request, of a message
sent to a distribution group (a ``directory`` step's ``group``, defined before the send).

On resubmission the group is expanded afresh: a member removed since (in no membership
that may be in force from the request to the redelivery) gets nothing, and a member added
since (in every such membership) and in the database the request names (SN-5: a request
is for one mailbox database) gets the old message. Judged only for a message already
delivered once before the request (so that what comes after it is a redelivery), where
every node was up when the group changed (a node down misses a directory change).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.state import Change, Timeline

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Delivery, Sent
    from pytest_shadowcheck.checks.model.rules import Judge

__all__ = ["group_expansion_rule"]

#: a resubmitted message goes out at once; the slack covers a loaded machine
_REDELIVERY = 1.0


def _memberships(j: Judge, group: str) -> list[Change] | None:
    """The changes of ``group``'s members, or None when a node may have missed one."""
    changes: list[Change] = []
    for s in j.tl.steps:
        if s.step.kind != "directory" or (s.step.arg.group or "").lower() != group:
            continue
        nodes = j.tl.scenario.topology.nodes
        # steps run one after another: the next one (a kill) starts at t_next
        if any(j.tl.node_states(n, s.t, s.t) != {"up"} for n in nodes):
            return None
        members = frozenset(str(r).lower() for r in s.step.arg.members)
        changes.append(Change(s.t, s.t_next, members))
    return changes


def _listed(addresses: set[str] | frozenset[str]) -> str:
    return ", ".join(sorted(addresses)) or "nobody"


def group_expansion_rule(j: Judge, m: Sent) -> None:
    """SN-10: after a resubmission, a message to a group goes to its members of then."""
    if not m.accepted or m.t_reply is None:
        return
    requests = [s for s in j.tl.steps if s.step.kind == "resubmit" and s.t > m.t_reply]
    for address in {r.lower() for r in m.to}:
        changes = _memberships(j, address)
        if not changes or changes[0].hi > m.t_send:
            continue  # not a group when it was sent (or a node may have missed a change)
        for request in requests:
            first = [d for d in m.deliveries if d.t < request.t]
            # from a Shadow Safety Net: a node other than the primary (whose own Safety
            # Net holds the message as it categorised it)
            again = [d for d in m.deliveries if d.t >= request.t and d.by != m.via]
            if not first or not again:
                continue
            database = str(request.step.arg.database)
            _judge(j, m, address, changes, request.t, again, database)
            return


def _database(j: Judge, rcpt: str, asked: float) -> str | None:
    """``rcpt``'s mailbox database at the request: the topology's directory, changed by
    the ``directory`` steps done before it (the harness sets every running node's); "?"
    when one changes it after (the request may be answered later, on either)."""
    recipients = (j.tl.scenario.topology.directory or {}).get("recipients") or {}
    found = {str(k).lower(): v for k, v in recipients.items()}.get(rcpt)
    for s in j.tl.steps:
        if s.step.kind != "directory" or (s.step.arg.recipient or "").lower() != rcpt:
            continue
        if s.t_next > asked:
            return "?"  # changed while the request was pending: either may be read
        found = s.step.arg.database
    return str(found) if found is not None else None


def _judge(
    j: Judge,
    m: Sent,
    group: str,
    changes: list[Change],
    asked: float,
    again: list[Delivery],
    database: str,
) -> None:
    others = {r.lower() for r in m.to} - {group}
    start: frozenset[str] = frozenset()
    got: set[str] = set()
    for d in again:
        # every membership that may be in force from the request to this redelivery
        now = Timeline._values(start, changes, asked, d.t)
        allowed = set().union(*now) | others
        removed = set(d.recipients) - allowed
        j.exercised["SN-10"] += 1
        if removed:
            j.diverged(
                "SN-10",
                f"{m.ref}, sent to the group {group} and resubmitted after the request at "
                f"{j.when(asked)}, goes to the group's members of then "
                f"({_listed(set().union(*now))}): {_listed(removed)}, no longer a member, "
                "gets nothing",
                f"{d.by} delivered {m.ref} again at {j.when(d.t)} to {_listed(set(d.recipients))}",
                d.t,
            )
            return
        got |= set(d.recipients)
    last = max(d.t for d in again)
    if j.tl.end < last + j.slack + _REDELIVERY:
        return  # a redelivery to the others may still be on its way
    surely = set.intersection(*(set(v) for v in Timeline._values(start, changes, asked, last)))
    before = {r for d in m.deliveries if d.t < asked for r in d.recipients}
    # the request names a database (SN-5): the members owed are that database's
    added = {r for r in surely - before - got if _database(j, r, asked) == database}
    if added:
        j.diverged(
            "SN-10",
            f"{m.ref}, sent to the group {group} and resubmitted after the request at "
            f"{j.when(asked)} for {database}, goes to the group's members of then in "
            f"{database}: {_listed(added)}, added since, gets the old message",
            f"by {j.when(j.tl.end)} it was delivered again only to {_listed(got)}",
            last,
        )
