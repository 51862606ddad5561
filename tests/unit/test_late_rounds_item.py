"""The item of a request's late rounds (adapters/late_rounds.py): each write holds only on the
round and phase it was decided from. DynamoDB is moto's, with the stack's key and index."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from dynamodb_table import item

from gpufill.adapters import clock, late_rounds
from gpufill.constants import LATE_ROUNDS_RETENTION_SECONDS

NOW = 1_800_000_000.0


@pytest.fixture(autouse=True)
def frozen(monkeypatch):
    monkeypatch.setattr(clock, "epoch", lambda: NOW + 0.7)


def test_a_round_is_opened_once_joined_while_open_listed_once_and_answered_once(table):
    assert late_rounds.read("req-1") is None
    assert late_rounds.join("req-1", number=1, launch="b") is False  # no round to join
    assert late_rounds.open_round("req-1", number=1, due="2027-01-15T08:01:00+00:00", launch="a", expect=None) is True
    assert late_rounds.open_round("req-1", number=1, due="2027-01-15T08:02:00+00:00", launch="z", expect=None) is False
    assert late_rounds.join("req-1", number=1, launch="b") is True
    assert late_rounds.join("req-1", number=2, launch="c") is False
    assert late_rounds.read("req-1") == {
        "instance_id": "late#req-1", "kind": "late-rounds", "round": 1, "phase": "open", "due": "2027-01-15T08:01:00+00:00",
        "opened_by": "a", "launches": ["a", "b"], "expires_at": int(NOW) + LATE_ROUNDS_RETENTION_SECONDS,
    }
    assert "request_id" not in item(table, "late#req-1")  # never in the by-request index
    assert late_rounds.mark_asked("req-1", number=2, until="u") is False
    assert late_rounds.mark_asked("req-1", number=1, until="2027-01-16T08:06:00+00:00") is True
    assert late_rounds.mark_asked("req-1", number=1, until="later") is False  # listed once
    assert late_rounds.join("req-1", number=1, launch="c") is False  # listed: too late to join
    assert late_rounds.read("req-1")["until"] == "2027-01-16T08:06:00+00:00"
    # The next round, opened from the item as it was read; a stale read loses.
    assert late_rounds.open_round("req-1", number=2, due="d", launch="c", expect={"round": 1, "phase": "open"}) is False
    assert late_rounds.open_round("req-1", number=2, due="d", launch="c", expect={"round": 1, "phase": "asked"}) is True
    found = late_rounds.read("req-1")
    assert (found["round"], found["phase"], found["opened_by"], found["launches"]) == (2, "open", "c", ["a", "b", "c"])
    assert "until" not in found
    assert late_rounds.mark_answered("req-1", number=1) is False  # round 2 is current: round 1 is not
    assert late_rounds.mark_answered("req-1", number=2) is True
    assert late_rounds.mark_answered("req-1", number=2) is False
    assert late_rounds.read("req-1")["phase"] == "answered"


def test_other_refusals_are_raised(table, monkeypatch):
    class Refusing:
        def update_item(self, **kwargs):
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "UpdateItem")

    monkeypatch.setattr(late_rounds, "_table", lambda: Refusing())
    with pytest.raises(ClientError):
        late_rounds.join("req-1", number=1, launch="b")


def test_the_item_is_read_strongly_consistent(monkeypatch):
    asked = []

    class Recording:
        def get_item(self, **kwargs):
            asked.append(kwargs)
            return {}

    monkeypatch.setattr(late_rounds, "_table", lambda: Recording())
    assert late_rounds.read("req-1") is None
    assert asked == [{"Key": {"instance_id": "late#req-1"}, "ConsistentRead": True}]
