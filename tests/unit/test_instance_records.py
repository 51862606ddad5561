"""The instance records a run keeps (adapters/instances_table.py): what a launch writes, what a
retried step, a teardown, a rollback, the boot check and a reclaim may and may not change, and
what status and teardown read back. DynamoDB is moto's, with the stack's key and index."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from botocore.exceptions import ClientError

from dynamodb_table import item
from gpufill.adapters import clock, instances_table
from gpufill.constants import TERMINATED_RECORD_RETENTION_SECONDS
from gpufill.models.run import Instance
from gpufill.models.teardown import LiveInstance

AT = datetime(2026, 12, 4, 3, 0, 0, tzinfo=UTC)
TTL = int(AT.timestamp()) + TERMINATED_RECORD_RETENTION_SECONDS


def instance(iid="i-1", **kw) -> Instance:
    return Instance(instance_id=iid, region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge",
                    market="spot", **{"hourly_price": 0.4, **kw})


def test_a_launched_instance_is_recorded_with_its_request_token_and_price(table, monkeypatch):
    monkeypatch.setattr(clock, "iso_now", lambda: "2026-12-04T03:00:00+00:00")
    instances_table.record_launched([instance("i-1"), instance("i-2", hourly_price=None)], request_id="req-1", client_token="tok")
    assert item(table, "i-1") == {
        "instance_id": "i-1", "region": "us-west-2", "availability_zone": "us-west-2a", "instance_type": "g6.xlarge",
        "market": "spot", "hourly_price": Decimal("0.4"), "request_id": "req-1", "client_token": "tok", "state": "pending",
        "launched_at": "2026-12-04T03:00:00+00:00"}
    assert "hourly_price" not in item(table, "i-2")


def test_an_instance_in_a_capacity_block_is_recorded_with_the_blocks_fee(table, monkeypatch):
    """The fee is the instance's spend in `gpufill status`, counted once per block."""
    monkeypatch.setattr(clock, "iso_now", lambda: "2026-12-04T03:00:00+00:00")
    instances_table.record_launched([instance("i-1", hourly_price=28.9583, capacity_reservation_id="cr-1",
                                              capacity_block_fee=1390.55)], request_id="req-1", client_token="tok")
    stored = item(table, "i-1")
    assert (stored["capacity_reservation_id"], stored["capacity_block_fee"], stored["hourly_price"]) == (
        "cr-1", Decimal("1390.55"), Decimal("28.9583"))
    assert instances_table.records_by_ids(["i-1"])["i-1"]["capacity_block_fee"] == 1390.55


def test_a_request_with_a_lifetime_records_when_it_expires(table):
    from gpufill.constants import LIFETIME_ATTRIBUTE

    instances_table.record_launched([instance("i-1")], request_id="req-1", client_token="tok",
                                    lifetime_expires_at="2026-12-05T03:00:00+00:00")
    assert item(table, "i-1")[LIFETIME_ATTRIBUTE] == "2026-12-05T03:00:00+00:00"


def test_a_maintained_refill_records_what_it_replaces(table):
    instances_table.record_launched([instance("i-new")], request_id="req-1", client_token="tok", maintain=True, replaces=["i-old"])
    record = item(table, "i-new")
    assert record["maintain"] is True and record["replaces"] == ["i-old"]
    instances_table.record_launched([instance("i-plain")], request_id="req-1", client_token="tok")
    assert "maintain" not in item(table, "i-plain") and "replaces" not in item(table, "i-plain")


def test_a_retried_launch_step_adds_what_was_missing_and_takes_back_nothing(table):
    instances_table.mark_terminated("i-1", region="us-west-2", request_id=None, terminated_at=AT, terminated_by="teardown:t1")
    instances_table.record_launched([instance("i-1")], request_id="req-1", client_token="tok")
    record = item(table, "i-1")
    assert record["state"] == "terminated" and record["terminated_by"] == "teardown:t1"
    assert record["request_id"] == "req-1" and record["client_token"] == "tok" and record["instance_type"] == "g6.xlarge"


def test_a_record_that_cannot_be_written_fails_the_step_naming_the_instances(table, monkeypatch):
    def broken():
        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}}, "UpdateItem")

    monkeypatch.setattr(instances_table, "_table", broken)
    with pytest.raises(instances_table.InstanceRecordError, match=r"could not record \['i-1', 'i-2'\]: .*slow"):
        instances_table.record_launched([instance("i-1"), instance("i-2")], request_id="req-1", client_token="tok")


def test_a_requests_records_are_read_back_by_the_index_and_plain(table):
    instances_table.record_launched([instance("i-1"), instance("i-2")], request_id="req-1", client_token="tok")
    instances_table.record_launched([instance("i-3")], request_id="req-2", client_token="tok")
    found = instances_table.records_for_request("req-1")
    assert sorted(r["instance_id"] for r in found) == ["i-1", "i-2"]
    holdings = instances_table.request_holdings("req-1")
    assert sorted(holdings.records) == ["i-1", "i-2"] and holdings.records["i-1"]["hourly_price"] == 0.4


class PagedTable:
    """Two pages for query and scan, as DynamoDB splits a large answer."""

    def __init__(self, pages):
        self.pages, self.asked = pages, []

    def _page(self, kwargs):
        self.asked.append(kwargs)
        return self.pages[len(self.asked) - 1]

    def query(self, **kwargs):
        return self._page(kwargs)

    def scan(self, **kwargs):
        return self._page(kwargs)


def test_every_page_of_a_large_answer_is_read(monkeypatch):
    pages = [{"Items": [{"instance_id": "i-1"}], "LastEvaluatedKey": {"instance_id": "i-1"}}, {"Items": [{"instance_id": "i-2"}]}]
    paged = PagedTable(pages)
    monkeypatch.setattr(instances_table, "_table", lambda: paged)
    assert [r["instance_id"] for r in instances_table.records_for_request("req-1")] == ["i-1", "i-2"]
    assert paged.asked[1]["ExclusiveStartKey"] == {"instance_id": "i-1"}
    assert paged.asked[0]["IndexName"] == "by-request" and paged.asked[0]["ExpressionAttributeValues"] == {":r": "req-1"}
    paged = PagedTable(pages)
    monkeypatch.setattr(instances_table, "_table", lambda: paged)
    assert sorted(instances_table.all_holdings().records) == ["i-1", "i-2"]
    assert "ExclusiveStartKey" not in paged.asked[0] and paged.asked[1]["ExclusiveStartKey"] == {"instance_id": "i-1"}


def test_holdings_tell_instance_records_from_intents_approvals_and_the_regions_set():
    holdings = instances_table.Holdings()
    for entry in [
        {"instance_id": "i-1", "state": "running", "count": Decimal("3")},
        {"instance_id": "intent#tok", "kind": "intent", "region": "us-east-1"},
        {"instance_id": "intent#tok2", "kind": "intent"},
        {"instance_id": "meta#launch-regions", "regions": {"eu-west-1", "us-west-2"}},
        {"instance_id": "meta#launch-regions"},
        {"instance_id": "approval#run-1", "state": "pending"},
        {"instance_id": "plan#req-1#spot", "pools": "x"},
        {"instance_id": "request#req-1", "kind": "request"},
    ]:
        holdings.add(entry)
    assert holdings.records == {"i-1": {"instance_id": "i-1", "state": "running", "count": 3}}
    assert holdings.intent_regions == {"us-east-1"}
    assert holdings.launch_regions == {"eu-west-1", "us-west-2"}


def test_numbers_read_back_as_ints_except_prices_and_sets_as_sorted_lists():
    assert instances_table.plain({"hourly_price": Decimal("2"), "count": Decimal("2"), "ratio": Decimal("0.5"),
                                  "replaced_by": {"i-b", "i-a"}, "state": "running"}) == {
        "hourly_price": 2.0, "count": 2, "ratio": 0.5, "replaced_by": ["i-a", "i-b"], "state": "running"}
    assert isinstance(instances_table.plain({"hourly_price": Decimal("2")})["hourly_price"], float)
    assert isinstance(instances_table.plain({"count": Decimal("2")})["count"], int)


def test_records_by_ids_reads_only_what_gpufill_holds_more_than_100_at_a_time(table):
    instances_table.record_launched([instance(f"i-{n:03}") for n in range(0, 230, 2)], request_id="req-1", client_token="tok")
    found = instances_table.records_by_ids([f"i-{n:03}" for n in range(230)])
    assert sorted(found) == [f"i-{n:03}" for n in range(0, 230, 2)]
    assert found["i-002"]["hourly_price"] == 0.4 and found["i-002"]["request_id"] == "req-1"


def test_records_by_ids_asks_again_for_the_keys_dynamodb_left_unprocessed(monkeypatch):
    asked = []

    class DynamoDB:
        def batch_get_item(self, RequestItems):
            asked.append(RequestItems)
            [(name, request)] = RequestItems.items()
            if len(asked) == 1:
                return {"Responses": {name: [{"instance_id": "i-1"}]},
                        "UnprocessedKeys": {name: {"Keys": request["Keys"][1:], "ConsistentRead": True}}}
            return {"Responses": {name: [{"instance_id": k["instance_id"]} for k in request["Keys"]]}}

    monkeypatch.setenv("INSTANCES_TABLE", "t")
    monkeypatch.setattr(instances_table, "resource", lambda service: DynamoDB())
    assert sorted(instances_table.records_by_ids(["i-1", "i-2"])) == ["i-1", "i-2"]
    assert asked[0] == {"t": {"Keys": [{"instance_id": "i-1"}, {"instance_id": "i-2"}], "ConsistentRead": True}}
    assert asked[1]["t"]["Keys"] == [{"instance_id": "i-2"}]
    assert instances_table.records_by_ids([]) == {}


def live(iid="i-9", **kw) -> LiveInstance:
    return LiveInstance(instance_id=iid, region="us-west-2", **{"state": "running", **kw})


def test_an_instance_found_without_a_record_is_recorded_as_reconciled_once(table):
    found = live(availability_zone="us-west-2a", instance_type="g6.xlarge", spot=True, client_token="tok",
                 launch_time="2026-12-04T02:00:00+00:00")
    written = instances_table.record_reconciled(found, request_id="req-1", seen_at=AT)
    assert written == item(table, "i-9") == {
        "instance_id": "i-9", "request_id": "req-1", "region": "us-west-2", "availability_zone": "us-west-2a",
        "instance_type": "g6.xlarge", "market": "spot", "client_token": "tok", "state": "running",
        "launched_at": "2026-12-04T02:00:00+00:00", "reconciled": True, "reconciled_at": "2026-12-04T03:00:00+00:00"}
    assert instances_table.record_reconciled(live(state="stopped"), request_id="req-1", seen_at=AT) is None
    assert item(table, "i-9")["state"] == "running"
    assert instances_table.record_reconciled(live("i-8"), request_id="req-1", seen_at=AT)["market"] == "on-demand"
    assert "client_token" not in item(table, "i-8")
    # EC2's InstanceLifecycle capacity-block: recorded as what it is, never as On-Demand.
    assert instances_table.record_reconciled(live("i-7", capacity_block=True), request_id="req-1", seen_at=AT)["market"] == "capacity-block"


def test_ec2s_instance_lifecycle_says_spot_capacity_block_or_nothing():
    from gpufill.adapters import managed_instances

    def seen(lifecycle):
        return managed_instances._live("us-west-2", {"InstanceId": "i-1", "State": {"Name": "running"},
                                                      **({"InstanceLifecycle": lifecycle} if lifecycle else {})})

    assert [seen(x).market for x in ("spot", "capacity-block", None, "scheduled")] == ["spot", "capacity-block", "on-demand", "on-demand"]


def failing(code):
    class Table:
        def __getattr__(self, _name):
            def call(**_):
                raise ClientError({"Error": {"Code": code, "Message": code}}, "UpdateItem")
            return call
    return lambda: Table()


def test_a_failed_write_that_is_not_a_condition_is_never_swallowed(monkeypatch):
    monkeypatch.setattr(instances_table, "_table", failing("ProvisionedThroughputExceededException"))
    for write in (lambda: instances_table.record_reconciled(live(), request_id="r", seen_at=AT),
                  lambda: instances_table.mark_ended("i-1", state="terminated", seen_at=AT),
                  lambda: instances_table.record_boot_state(instance(), lost=False),
                  lambda: instances_table.mark_replaced(["i-1"], ["i-2"])):
        with pytest.raises(ClientError):
            write()


def test_a_teardown_marks_the_end_keeps_the_record_and_gives_it_a_ttl(table):
    instances_table.record_launched([instance("i-1")], request_id="req-1", client_token="tok")
    instances_table.mark_terminated("i-1", region="eu-west-1", request_id="req-other", terminated_at=AT, terminated_by="teardown:t1")
    record = item(table, "i-1")
    assert (record["state"], record["terminated_at"], record["terminated_by"]) == ("terminated", "2026-12-04T03:00:00+00:00", "teardown:t1")
    assert record["region"] == "us-west-2" and record["request_id"] == "req-1" and record["expires_at"] == TTL
    assert record["instance_type"] == "g6.xlarge"
    instances_table.mark_terminated("i-2", region="eu-west-1", request_id="req-2", terminated_at=AT, terminated_by="teardown:t1")
    assert (item(table, "i-2")["region"], item(table, "i-2")["request_id"]) == ("eu-west-1", "req-2")
    instances_table.mark_terminated("i-3", region="eu-west-1", request_id=None, terminated_at=AT, terminated_by="teardown:t1")
    assert "request_id" not in item(table, "i-3")


def test_a_rollback_marks_its_own_instance_ended_by_the_run(table):
    instances_table.record_launched([instance("i-1")], request_id="req-1", client_token="tok")
    instances_table.mark_rolled_back("i-1", region="eu-west-1", request_id="req-x", terminated_at=AT, reason="why")
    record = item(table, "i-1")
    assert (record["state"], record["rolled_back"], record["terminated_by"]) == ("terminated", True, "rollback:req-x")
    assert (record["region"], record["request_id"], record["expires_at"]) == ("us-west-2", "req-1", TTL)
    assert (record["terminated_at"], record["rolled_back_reason"]) == ("2026-12-04T03:00:00+00:00", "why")
    instances_table.mark_rolled_back("i-2", region="eu-west-1", request_id="req-x", terminated_at=AT, reason="why")
    assert (item(table, "i-2")["region"], item(table, "i-2")["request_id"]) == ("eu-west-1", "req-x")


def test_an_end_seen_by_status_is_written_only_on_a_record_that_exists(table):
    instances_table.record_launched([instance("i-1")], request_id="req-1", client_token="tok")
    instances_table.mark_ended("i-1", state="terminated", seen_at=AT)
    record = item(table, "i-1")
    assert (record["state"], record["ended_seen_at"], record["expires_at"]) == ("terminated", "2026-12-04T03:00:00+00:00", TTL)
    instances_table.mark_ended("i-none", state="terminated", seen_at=AT)
    assert item(table, "i-none") is None


def test_the_boot_check_writes_state_and_ip_but_never_over_a_recorded_end(table, monkeypatch):
    monkeypatch.setattr(clock, "iso_now", lambda: "2026-12-04T03:05:00+00:00")
    instances_table.record_launched([instance("i-1"), instance("i-2"), instance("i-3")], request_id="req-1", client_token="tok")
    instances_table.record_boot_state(instance("i-1", state="running", private_ip="10.0.0.1"), lost=False)
    record = item(table, "i-1")
    assert (record["state"], record["private_ip"], record["checked_at"]) == ("running", "10.0.0.1", "2026-12-04T03:05:00+00:00")
    assert "lost_reason" not in record
    instances_table.record_boot_state(instance("i-2", state="terminated"), lost=True)
    assert item(table, "i-2")["lost_reason"] == "ended before it was running (spot capacity reclaimed at launch)"
    assert "private_ip" not in item(table, "i-2")
    instances_table.record_boot_state(instance("i-3"), lost=False)
    assert item(table, "i-3")["state"] == "unknown"
    instances_table.mark_terminated("i-1", region="us-west-2", request_id="req-1", terminated_at=AT, terminated_by="teardown:t")
    instances_table.record_boot_state(instance("i-1", state="running", private_ip="10.0.0.9"), lost=False)
    assert item(table, "i-1")["state"] == "terminated" and item(table, "i-1")["private_ip"] == "10.0.0.1"


def test_a_reclaimed_instance_names_its_refill_and_keeps_the_first_warning(table):
    instances_table.record_launched([instance("i-1")], request_id="req-1", client_token="tok")
    instances_table.mark_interrupted("i-1", interruption="rebalance", refill_run="refill-1", at=AT)
    instances_table.mark_interrupted("i-1", interruption="terminated", refill_run="refill-2",
                                     at=AT.replace(hour=4))
    record = item(table, "i-1")
    assert (record["state"], record["refill_run"], record["interruption"], record["interrupted_at"]) == (
        "interrupted", "refill-2", "rebalance", "2026-12-04T03:00:00+00:00")
    assert record["request_id"] == "req-1"
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        instances_table.mark_interrupted("i-none", interruption="x", refill_run="r", at=AT)


def test_a_reclaim_a_waiting_teardown_holds_back_names_that_teardown_and_keeps_the_first_warning(table):
    instances_table.record_launched([instance("i-1")], request_id="req-1", client_token="tok")
    instances_table.mark_refill_held("i-1", interruption="rebalance", held_by="teardown-t1", at=AT)
    instances_table.mark_refill_held("i-1", interruption="terminated", held_by="teardown-t1", at=AT.replace(hour=4))
    record = item(table, "i-1")
    assert (record["state"], record["refill_held_by"], record["interruption"], record["interrupted_at"]) == (
        "interrupted", "teardown-t1", "rebalance", "2026-12-04T03:00:00+00:00")
    assert "refill_run" not in record and record["request_id"] == "req-1"
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        instances_table.mark_refill_held("i-none", interruption="x", held_by="t", at=AT)


def test_a_restart_is_claimed_once_from_the_refill_run_it_was_decided_from(table):
    instances_table.record_launched([instance("i-1")], request_id="req-1", client_token="tok")
    instances_table.mark_refill_held("i-1", interruption="rebalance", held_by="td-a", at=AT)
    # Held back, no refill ever started: the first ending claims it, a second one from the same read does not.
    assert instances_table.mark_refill_restarted("i-1", refill_run="run-1", was=None, by="td-a") is True
    assert instances_table.mark_refill_restarted("i-1", refill_run="run-x", was=None, by="td-b") is False
    # From then on, a restart must name the run it takes over from.
    assert instances_table.mark_refill_restarted("i-1", refill_run="run-x", was="run-0", by="td-b") is False
    assert instances_table.mark_refill_restarted("i-1", refill_run="run-2", was="run-1", by="td-c") is True
    record = item(table, "i-1")
    assert (record["refill_run"], record["refill_restarted_by"], record["refill_held_by"]) == ("run-2", "td-c", "td-a")
    assert instances_table.mark_refill_restarted("i-none", refill_run="run-1", was=None, by="td-a") is False
    assert item(table, "i-none") is None
    with pytest.raises(ClientError, match="ResourceNotFound"):
        instances_table._table().meta.client.delete_table(TableName=table.name)
        instances_table.mark_refill_restarted("i-1", refill_run="run-3", was="run-2", by="td-d")


def test_replacements_are_added_once_and_an_unknown_instance_is_skipped(table):
    instances_table.record_launched([instance("i-1"), instance("i-2")], request_id="req-1", client_token="tok")
    instances_table.mark_replaced(["i-none", "i-1", "i-2"], ["i-9"])
    instances_table.mark_replaced(["i-1"], ["i-9", "i-8"])
    assert item(table, "i-1")["replaced_by"] == {"i-8", "i-9"}
    assert item(table, "i-2")["replaced_by"] == {"i-9"}
    assert item(table, "i-none") is None


def test_a_batch_read_dynamodb_left_wholly_unprocessed_is_asked_again(monkeypatch):
    answers = iter([
        {"Responses": {}, "UnprocessedKeys": {"t": {"Keys": [{"instance_id": "i-1"}], "ConsistentRead": True}}},
        {"Responses": {"t": [{"instance_id": "i-1", "state": "running"}]}},
    ])

    class DynamoDB:
        def batch_get_item(self, RequestItems):
            return next(answers)

    monkeypatch.setenv("INSTANCES_TABLE", "t")
    monkeypatch.setattr(instances_table, "resource", lambda service: DynamoDB())
    assert instances_table.records_by_ids(["i-1"]) == {"i-1": {"instance_id": "i-1", "state": "running"}}


def test_records_by_ids_asks_for_up_to_100_keys_a_call(table, monkeypatch):
    calls = []
    real = instances_table.resource("dynamodb")

    class Counting:
        def batch_get_item(self, RequestItems):
            calls.append(len(next(iter(RequestItems.values()))["Keys"]))
            return real.batch_get_item(RequestItems=RequestItems)

    monkeypatch.setattr(instances_table, "resource", lambda service: Counting())
    instances_table.records_by_ids([f"i-{n:03}" for n in range(230)])
    assert calls == [100, 100, 30]
