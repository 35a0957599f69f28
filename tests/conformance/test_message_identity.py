"""Two different messages that share one Message-ID are two messages: the harness
identifies each by the trace it adds, so the loss of one is never hidden by the
delivery of the other (issue 26)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_broken_variants import run_suite

pytestmark = pytest.mark.slow

CR8 = "cr8_sender_timeout_after_copy_still_delivered"


def test_the_loss_of_a_message_sharing_its_message_id_with_a_delivered_one_fails(
    tmp_path: Path,
) -> None:
    # m1 and m2 carry one Message-ID; the variant delivers m1 and drops m2 after its 250
    transcript: list[str] = []
    found = run_suite(
        tmp_path, "broken:suppresses-repeated-message-id", (CR8,), transcript=transcript
    )
    assert found[CR8][0] == "failed"
    out = transcript[0]
    assert "[FAIL] no loss of m2" in out, out[-4000:]
    assert "mbx1 acknowledged m2 (`250 " in out
    # the delivered one is not blamed
    assert "[FAIL] no loss of m1" not in out
