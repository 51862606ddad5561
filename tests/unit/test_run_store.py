"""What a run keeps beside its state (adapters/run_store.py): region facts, the ranked plan, the
attempt log, the launch intents a teardown reconciles by, a waiting request's view and a
maintained request's stop mark. DynamoDB is moto's, with the stack's key and index."""

import gzip
import json
from decimal import Decimal

import pytest

from dynamodb_table import item
from gpufill.adapters import clock, run_store
from gpufill.constants import INTENT_RETENTION_SECONDS
from gpufill.models.run import Attempt, Plan, Pool, RegionFacts

NOW = 1_800_000_000.0


@pytest.fixture(autouse=True)
def frozen(monkeypatch):
    monkeypatch.setattr(clock, "epoch", lambda: NOW + 0.7)
    monkeypatch.setattr(clock, "iso_now", lambda: "2027-01-15T08:00:00+00:00")
    run_store.forget()
    yield
    run_store.forget()


def attempt(number, **kw) -> Attempt:
    return Attempt(number=number, region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge",
                   market="spot", batch=4, launched=kw.pop("launched", 0), outcome=kw.pop("outcome", "capacity"), **kw)


def test_region_facts_are_kept_per_request_and_region_and_expire(table):
    run_store.save_facts("req-1", RegionFacts(region="us-west-2", error="unreachable"))
    run_store.save_facts("req-1", RegionFacts(region="eu-west-1"))
    run_store.save_facts("req-2", RegionFacts(region="us-east-1"))
    found = run_store.load_facts("req-1", ["us-west-2", "eu-west-1", "us-east-1"])
    assert found == {"us-west-2": RegionFacts(region="us-west-2", error="unreachable"), "eu-west-1": RegionFacts(region="eu-west-1")}
    stored = item(table, "facts#req-1#us-west-2")
    assert stored["kind"] == "facts" and stored["expires_at"] == int(NOW) + INTENT_RETENTION_SECONDS
    assert json.loads(gzip.decompress(stored["body"].value)) == {"region": "us-west-2", "types": [], "error": "unreachable"}


def plan(price=0.4) -> Plan:
    return Plan(request_id="req-1", market="spot", pools=[
        Pool(region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot", price=price)])


def test_a_plan_is_stored_under_a_key_naming_its_content(table):
    key = run_store.save_plan(plan())
    assert key.startswith("plan#req-1#spot#") and len(key.rsplit("#", 1)[1]) == 16
    assert run_store.save_plan(plan()) == key
    other = run_store.save_plan(plan(price=0.5))
    assert other != key
    assert run_store.load_plan(key) == plan() and run_store.load_plan(other) == plan(price=0.5)
    stored = item(table, key)
    assert stored["kind"] == "plan" and stored["expires_at"] == int(NOW) + INTENT_RETENTION_SECONDS


def test_a_missing_plan_is_an_error_naming_its_key(table):
    with pytest.raises(LookupError, match="plan plan#nope is not in the table"):
        run_store.load_plan("plan#nope")


def test_the_attempt_log_is_written_in_batches_and_read_back_in_order(table):
    attempts = [attempt(n, reason="InsufficientInstanceCapacity") for n in range(1, 61)]
    run_store.save_attempts("req-1", attempts)
    run_store.save_attempts("req-1", [attempt(2, launched=4, outcome="launched")])  # a retried step rewrites its own
    loaded = run_store.load_attempts("req-1", 60)
    assert [a.number for a in loaded] == list(range(1, 61))
    assert loaded[1].outcome == "launched" and loaded[0].reason == "InsufficientInstanceCapacity"
    assert run_store.load_attempts("req-1", 0) == [] and len(run_store.load_attempts("req-1", 3)) == 3
    stored = item(table, "attempt#req-1#5")
    assert stored["kind"] == "attempt" and stored["expires_at"] == int(NOW) + INTENT_RETENTION_SECONDS


def test_unprocessed_writes_and_reads_are_sent_again(monkeypatch):
    writes, reads = [], []

    class DynamoDB:
        def batch_write_item(self, RequestItems):
            writes.append(RequestItems)
            [(name, batch)] = RequestItems.items()
            return {"UnprocessedItems": {name: batch[1:]}} if len(batch) > 1 else {}

        def batch_get_item(self, RequestItems):
            reads.append(RequestItems)
            [(name, request)] = RequestItems.items()
            first, *rest = request["Keys"]
            return {"Responses": {name: [{"instance_id": first["instance_id"], "body": "{}"}]},
                    "UnprocessedKeys": {name: {"Keys": rest, "ConsistentRead": True}} if rest else {}}

    monkeypatch.setenv("INSTANCES_TABLE", "t")
    monkeypatch.setattr(run_store, "resource", lambda service: DynamoDB())
    run_store.save_attempts("req-1", [attempt(n) for n in (1, 2, 3)])
    assert [len(w["t"]) for w in writes] == [3, 2, 1]
    assert sorted(run_store._batch_get(["a", "b", "c"])) == ["a", "b", "c"]
    assert reads[0]["t"]["ConsistentRead"] is True and len(reads) == 3


def test_reads_and_writes_keep_to_dynamodbs_batch_limits(table, monkeypatch):
    sizes = []
    real = run_store.resource

    class Counting:
        def __init__(self):
            self.inner = real("dynamodb")

        def batch_write_item(self, RequestItems):
            sizes.append(("write", len(next(iter(RequestItems.values())))))
            return self.inner.batch_write_item(RequestItems=RequestItems)

        def batch_get_item(self, RequestItems):
            sizes.append(("get", len(next(iter(RequestItems.values()))["Keys"])))
            return self.inner.batch_get_item(RequestItems=RequestItems)

    counting = Counting()
    monkeypatch.setattr(run_store, "resource", lambda service: counting)
    run_store.save_attempts("req-1", [attempt(n) for n in range(1, 27)])
    run_store.load_attempts("req-1", 101)
    assert sizes == [("write", 25), ("write", 1), ("get", 100), ("get", 1)]


def test_an_intent_names_the_request_region_token_and_deployment_before_any_launch(table, monkeypatch):
    monkeypatch.setenv("GPUFILL_DEPLOYMENT", "prod")
    run_store.record_intent(request_id="req-1", region="eu-west-1", client_token="tok-1")
    assert item(table, "intent#tok-1") == {
        "instance_id": "intent#tok-1", "kind": "intent", "request_id": "req-1", "region": "eu-west-1",
        "client_token": "tok-1", "deployment": "prod", "created_at": "2027-01-15T08:00:00+00:00",
        "expires_at": int(NOW) + INTENT_RETENTION_SECONDS}


def test_an_intent_without_a_deployment_says_so_with_an_empty_name(table, monkeypatch):
    monkeypatch.delenv("GPUFILL_DEPLOYMENT", raising=False)
    run_store.record_intent(request_id="req-1", region="eu-west-1", client_token="tok-1")
    assert item(table, "intent#tok-1")["deployment"] == ""


def test_every_region_ever_launched_in_is_kept_once(table):
    for region in ("us-west-2", "eu-west-1", "us-west-2"):
        run_store.note_launch_region(region)
    stored = item(table, "meta#launch-regions")
    assert stored["regions"] == {"us-west-2", "eu-west-1"} and stored["kind"] == "meta"


def test_a_waits_view_is_written_read_back_plain_and_a_field_set_to_none_removed(table):
    run_store.save_wait("req-1", {"phase": "waiting", "tries": 3, "ratio": Decimal("0.5"), "next_try": "2027-01-15T09:00:00+00:00"})
    assert run_store.load_wait("req-1") == {"instance_id": "wait#req-1", "kind": "wait", "phase": "waiting", "tries": 3,
                                            "ratio": 0.5, "next_try": "2027-01-15T09:00:00+00:00",
                                            "expires_at": int(NOW) + INTENT_RETENTION_SECONDS}
    assert isinstance(run_store.load_wait("req-1")["tries"], int)
    run_store.save_wait("req-1", {"phase": "trying", "next_try": None})
    view = run_store.load_wait("req-1")
    assert view["phase"] == "trying" and "next_try" not in view and view["tries"] == 3
    assert run_store.load_wait("req-other") is None


def test_a_wait_view_with_a_capacity_blocks_fee_in_dollars_and_cents_is_stored_as_that_number(table):
    """DynamoDB refuses floats: the fee a purchase remembers for `gpufill status` is stored exactly."""
    run_store.save_wait("req-1", {"phase": "capacity-block", "upfront_fee": 1390.55, "instance_count": 2})
    stored = item(table, "wait#req-1")
    assert stored["upfront_fee"] == Decimal("1390.55") and stored["instance_count"] == 2
    assert run_store.load_wait("req-1")["upfront_fee"] == 1390.55


def test_a_teardown_stops_a_wait_only_while_it_waits_or_tries(table):
    assert run_store.mark_wait_stopped("req-1", by="teardown:t1") is False
    assert item(table, "wait#req-1") is None
    run_store.save_wait("req-1", {"phase": "waiting"})
    assert run_store.mark_wait_stopped("req-1", by="teardown:t1") is True
    assert run_store.load_wait("req-1")["stopped_by"] == "teardown:t1"
    run_store.save_wait("req-2", {"phase": "trying"})
    assert run_store.mark_wait_stopped("req-2", by="teardown:t2") is True
    run_store.save_wait("req-3", {"phase": "expired"})
    assert run_store.mark_wait_stopped("req-3", by="teardown:t3") is False
    # A run holding a Capacity Block waits too: for its payment, its start, and between launches into it.
    for phase in ("capacity-block-payment", "capacity-block", "capacity-block-in-use"):
        run_store.save_wait(f"block-{phase}", {"phase": phase})
        assert run_store.mark_wait_stopped(f"block-{phase}", by="teardown:t4") is True, phase
    run_store.save_wait("req-1", {"phase": "trying", "tries": 4})
    assert run_store.load_wait("req-1")["stopped_by"] == "teardown:t1"  # a later view keeps the stop mark


def test_a_maintained_request_is_kept_and_each_teardown_stops_its_maintenance_with_a_mark_of_its_own(table):
    assert run_store.load_request("req-1") is None and run_store.maintenance_stopped_by("req-1") is None
    assert run_store.end_maintenance("req-1", by="teardown:t1") is False
    assert item(table, "request#req-1") is None
    run_store.save_request("req-1", {"count": 4, "maintain": True})
    assert run_store.load_request("req-1") == {"count": 4, "maintain": True}
    assert item(table, "request#req-1")["kind"] == "request" and "expires_at" not in item(table, "request#req-1")
    assert run_store.maintenance_stopped_by("req-1") is None
    assert run_store.end_maintenance("req-1", by="teardown:t2") is True
    assert run_store.end_maintenance("req-1", by="teardown:t1") is True
    assert run_store.end_maintenance("req-1", by="teardown:t1") is True  # a retried step: one mark
    assert run_store.maintenance_stops("req-1") == {"teardown:t1", "teardown:t2"}
    assert run_store.maintenance_stopped_by("req-1") == "teardown:t1"  # the first by name
    run_store.save_request("req-1", {"count": 4, "maintain": True})  # a later step of the run keeps the marks
    assert run_store.maintenance_stops("req-1") == {"teardown:t1", "teardown:t2"}
    # A rejected teardown gives back only its own mark, once, and says which marks still stand.
    assert run_store.give_back_maintenance("req-1", by="teardown:t3") is None
    assert run_store.give_back_maintenance("req-1", by="teardown:t1") == {"teardown:t2"}
    assert run_store.give_back_maintenance("req-1", by="teardown:t1") is None
    assert run_store.maintenance_stopped_by("req-1") == "teardown:t2" and run_store.refills_stopped_by("req-1") == "teardown:t2"
    assert run_store.give_back_maintenance("req-1", by="teardown:t2") == frozenset()
    assert run_store.maintenance_stopped_by("req-1") is None and run_store.refills_stopped_by("req-1") is None
    assert run_store.load_request("req-1") == {"count": 4, "maintain": True}
    assert run_store.give_back_maintenance("req-1", by="teardown:t2") is None
    assert run_store.give_back_maintenance("never-kept", by="teardown:t1") is None


def test_a_mark_written_before_marks_were_per_teardown_reads_as_one_and_goes_the_same_way(table):
    run_store.save_request("req-1", {"count": 4, "maintain": True})
    table.update_item(Key={"instance_id": "request#req-1"}, UpdateExpression="SET maintenance_stopped_by = :by",
                      ExpressionAttributeValues={":by": "teardown:old"})
    assert run_store.refills_stopped_by("req-1") == "teardown:old"
    run_store.end_maintenance("req-1", by="teardown:new")
    assert run_store.maintenance_stops("req-1") == {"teardown:old", "teardown:new"}
    assert run_store.give_back_maintenance("req-1", by="teardown:other") is None
    assert run_store.give_back_maintenance("req-1", by="teardown:old") == {"teardown:new"}
    assert run_store.give_back_maintenance("req-1", by="teardown:new") == frozenset()
    assert run_store.refills_stopped_by("req-1") is None


def test_a_plan_is_read_once_per_container(table, monkeypatch):
    key = run_store.save_plan(plan())
    assert run_store.load_plan(key) == plan()
    monkeypatch.setattr(run_store, "_table", lambda: (_ for _ in ()).throw(AssertionError("read again")))
    assert run_store.load_plan(key) == plan()


def test_a_wait_view_can_drop_several_fields_at_once(table):
    run_store.save_wait("req-1", {"phase": "waiting", "next_try": "2027-01-15T09:00:00+00:00", "deadline": "2027-01-16T08:00:00+00:00"})
    run_store.save_wait("req-1", {"phase": "done", "next_try": None, "deadline": None})
    view = run_store.load_wait("req-1")
    assert view["phase"] == "done" and "next_try" not in view and "deadline" not in view


def test_a_stop_mark_written_moments_ago_is_read_strongly_consistent(monkeypatch):
    """An eventually consistent read may miss a teardown's stop mark written a moment before, and
    a wait or a refill would then launch for a request that was just torn down."""
    reads = []

    class Table:
        def get_item(self, **kwargs):
            reads.append(kwargs)
            return {}

    monkeypatch.setattr(run_store, "_table", lambda: Table())
    run_store.load_wait("req-1")
    run_store.load_request("req-1")
    run_store.maintenance_stopped_by("req-1")
    assert [r.get("ConsistentRead") for r in reads] == [True, True, True]


def test_the_attempt_log_reads_back_in_attempt_order_whatever_order_dynamodb_answers_in(monkeypatch):
    """BatchGetItem returns items in no particular order, and may leave every key of a call unprocessed."""
    bodies = {f"attempt#req-1#{n}": attempt(n).model_dump_json() for n in (1, 2, 3)}
    answers = iter([
        {"Responses": {}, "UnprocessedKeys": {"t": {"Keys": [{"instance_id": k} for k in bodies], "ConsistentRead": True}}},
        {"Responses": {"t": [{"instance_id": k, "body": bodies[k]} for k in reversed(bodies)]}},
    ])

    class DynamoDB:
        def batch_get_item(self, RequestItems):
            return next(answers)

    monkeypatch.setenv("INSTANCES_TABLE", "t")
    monkeypatch.setattr(run_store, "resource", lambda service: DynamoDB())
    assert [a.number for a in run_store.load_attempts("req-1", 3)] == [1, 2, 3]


def test_a_teardown_of_everything_pauses_every_refill_while_it_lists_and_only_its_own_pause_is_lifted(table, monkeypatch):
    run_store.save_request("req-1", {"count": 4, "maintain": True})
    assert run_store.refills_stopped_by("req-1") is None
    run_store.pause_maintenance(by="td-all")
    assert run_store.refills_stopped_by("req-1") == "td-all" and run_store.refills_stopped_by("never-kept") == "td-all"
    run_store.resume_maintenance(by="td-other")  # not its pause: it stays
    assert run_store.refills_stopped_by("req-1") == "td-all"
    run_store.end_maintenance("req-1", by="td-all")
    run_store.resume_maintenance(by="td-all")
    assert item(table, "maintenance#paused")["until"] == 0
    assert run_store.refills_stopped_by("req-1") == "td-all" and run_store.refills_stopped_by("req-2") is None


def test_a_pause_left_by_a_step_that_died_ends_on_its_own(table, monkeypatch):
    run_store.pause_maintenance(by="td-all")
    monkeypatch.setattr(clock, "epoch", lambda: NOW + 899.9)
    assert run_store.refills_stopped_by("req-1") == "td-all"
    monkeypatch.setattr(clock, "epoch", lambda: NOW + 900)  # its `until`, to the second: over
    assert run_store.refills_stopped_by("req-1") is None
    monkeypatch.setattr(clock, "epoch", lambda: NOW + 0.7 + 901)
    assert run_store.refills_stopped_by("req-1") is None
