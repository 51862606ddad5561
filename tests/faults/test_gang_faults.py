"""A gang rollback under faults: terminations that took effect with their replies lost."""

import pytest

from tests.support.audit import assert_exactly_once, table_items
from tests.workflow.test_gang import MARKET, gang


# A lost reply and a 5xx take the same settle-by-describing path; the 5xx runs in `make test-all`.
@pytest.mark.parametrize("error", ["ReadTimeout", pytest.param("InternalError", marks=pytest.mark.slow)])
def test_a_rollback_whose_terminations_lost_their_replies_says_nothing_keeps_running(account, error):
    with account(MARKET) as engine:
        # Every TerminateInstances ends the instances, and every reply is lost.
        engine.faults.aws("ec2", "TerminateInstances", error=error, after=True, times=None)
        execution = engine.run(gang(count=5, placement="same-az", all_or_nothing=True), name="gang-lost")
        assert engine.faults.injected and all(k == "aws:ec2:TerminateInstances" for k in engine.faults.injected)
        records = table_items("gang-lost")
        seen = assert_exactly_once(engine, execution, launched=0)
    assert execution.error == "GANG_NOT_PLACED", execution.cause
    assert "nothing keeps running" in execution.cause["message"]
    assert execution.cause["rolled_back_count"] == 11 == len(records)
    assert all(r["rolled_back"] and r["state"] == "terminated" for r in records)
    assert not seen.in_ec2
