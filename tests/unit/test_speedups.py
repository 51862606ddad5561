"""The engine's speed-ups of moto answer exactly what moto answers without them."""

import copy
import datetime
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufill.local import speedups

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
@settings(max_examples=50)
def test_a_json_copy_equals_a_deep_copy_and_shares_nothing_mutable(value):
    copied = speedups.json_copy(value)
    assert copied == copy.deepcopy(value)
    assert type(copied) is type(value)

    def containers(v):
        if isinstance(v, dict):
            yield v
            for item in v.values():
                yield from containers(item)
        elif isinstance(v, list):
            yield v
            for item in v:
                yield from containers(item)

    originals = {id(c) for c in containers(value)}
    assert not originals & {id(c) for c in containers(copied)}


def test_a_json_copy_leaves_other_objects_to_deepcopy_and_keeps_timestamps():
    when = datetime.datetime(2026, 12, 4, tzinfo=datetime.timezone.utc)
    counts = defaultdict(int, a=1)
    copied = speedups.json_copy({"at": when, "counts": counts, "pair": (1, [2])})
    assert copied["at"] == when
    assert type(copied["counts"]) is defaultdict and copied["counts"] == counts and copied["counts"] is not counts
    assert copied["pair"] == (1, [2]) and copied["pair"][1] is not None


def test_the_interpreters_copy_module_keeps_a_cycle_and_a_memo():
    shim = speedups._JsonCopying()
    looped: list = [1]
    looped.append(looped)
    copied = shim.deepcopy(looped)
    assert copied[1] is copied and copied is not looped
    memo: dict = {}
    shared = [1]
    assert shim.deepcopy([shared, shared], memo)[0] is not shared
    assert shim.copy is copy.copy


def _serialize(operation: str, service: str, result):
    """What moto's serializer answers for `result`, the way its responses do."""
    from moto.core.responses import XFormedAttributePicker
    from moto.core.serialize import get_serializer_class
    from moto.core.utils import get_service_model

    model = get_service_model(service)
    serializer = get_serializer_class(service, model.protocol)(
        operation_model=model.operation_model(operation), value_picker=XFormedAttributePicker()
    )
    return serializer.serialize(result)["body"]


class _Reservation:
    def __init__(self, ident):
        self.id = ident
        self.owner_id = "123456789012"
        self.instances = [_Instance(f"i-{ident}")]


class _Instance:
    class Meta:
        serialization_aliases = {"InstanceType": "kind"}

    def __init__(self, ident):
        self.instance_id = ident
        self.kind = "p5.48xlarge"
        self.tags = [{"Key": "gpufill:request", "Value": "r-1"}]


def test_member_names_listed_once_answer_as_moto_does():
    cases = [
        ("DescribeInstances", "ec2", {"Reservations": [_Reservation("r-1"), _Reservation("r-2")]}),
        ("DescribeInstances", "ec2", {"reservations": [{"ReservationId": "r-3", "instances": []}]}),
        ("GetItem", "dynamodb", {"Item": {"pk": {"S": "a"}, "n": {"N": "1"}}}),
        ("DescribeExecution", "stepfunctions", {"executionArn": "arn:x", "status": "RUNNING", "input": "{}"}),
    ]
    expected = [_serialize(*case) for case in cases]
    with speedups.one_alias_listing_per_member():
        assert [_serialize(*case) for case in cases] == expected
        assert [_serialize(*case) for case in cases] == expected  # from the listing kept
    assert "p5.48xlarge" in str(expected[0])  # the instance's Meta alias was followed


def test_update_expression_walkers_list_their_node_types_once_and_check_as_before():
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser
    from moto.dynamodb.parsing.validators import ActionCountValidator, ExecuteOperations

    before = {kind: kind().nodes_to_be_processed() for kind in (ActionCountValidator, ExecuteOperations)}
    with speedups.one_node_type_listing_per_traverser():
        for kind, types in before.items():
            assert kind().nodes_to_be_processed() == types
            assert kind().nodes_to_be_processed() == types
    assert "nodes_to_be_processed" in vars(DepthFirstTraverser)


def test_a_definition_that_built_once_is_not_built_again_for_create_state_machine_and_a_bad_one_always_fails():
    from unittest import mock

    import pytest
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    valid = '{"StartAt": "A", "States": {"A": {"Type": "Pass", "Comment": "validated once", "End": true}}}'
    invalid = '{"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}'  # a brace short
    builds = []
    original_visit = Preprocessor.visit

    def visit(preprocessor, tree):
        if type(tree).__name__ == "State_machineContext":  # a whole program's build (visit recurses)
            builds.append(tree)
        return original_visit(preprocessor, tree)

    with mock.patch.object(Preprocessor, "visit", visit), speedups.parse_definitions_once():
        StepFunctionsParserBackend._validate_definition(definition=valid)
        StepFunctionsParserBackend._validate_definition(definition=valid)
        assert len(builds) == 1
        refusals = []
        for _ in range(2):
            with pytest.raises(Exception) as refused:
                StepFunctionsParserBackend._validate_definition(definition=invalid)
            refusals.append((type(refused.value).__name__, str(refused.value)))
    assert refusals[0] == refusals[1] and refusals[0][0] == "InvalidDefinition"
    assert "_validate_definition" in vars(StepFunctionsParserBackend)  # moto's own again


def test_engines_share_a_client_only_when_made_from_the_same_credentials_and_variables(monkeypatch):
    import boto3

    from gpufill.local.deployments import shared_client

    def signing_key(client):
        return client._request_signer._credentials.access_key

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "gpufill-local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "gpufill-local")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # as moto starts each engine
    first = shared_client("sns", "us-west-2")
    assert shared_client("sns", "us-west-2") is first
    assert shared_client("sns", "us-east-1") is not first
    assert shared_client("sqs", "us-west-2") is not first
    # The session keeps the credentials it read first, and so does a client made in it meanwhile.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "someone-else")
    assert signing_key(shared_client("sns", "us-west-2")) == signing_key(boto3.client("sns", region_name="us-west-2"))
    # The next engine's session reads the variables again: another client, signing as someone else.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    other = shared_client("sns", "us-west-2")
    assert other is not first and signing_key(other) == "someone-else"


def test_update_expressions_clauses_counted_once_are_refused_and_passed_as_moto_does():
    from moto.dynamodb.exceptions import TooManyClauses
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser
    from moto.dynamodb.parsing.validators import ActionCountValidator

    expressions = [
        "SET a = :a, b = if_not_exists(b, :b) REMOVE c ADD d :d",
        "SET #s = :s, launched = list_append(if_not_exists(launched, :empty), :new), n = n + :one",
        "SET a = :a SET b = :b",
        "ADD a :a REMOVE b ADD c :c",
        "REMOVE a SET b = :b REMOVE c SET d = :d",
        "DELETE s :v ADD n :one",
    ]

    def outcome(text):
        tree = UpdateExpressionParser.make(text)
        try:
            return ActionCountValidator().traverse(tree) is tree, None
        except Exception as refused:  # noqa: BLE001 (which error, word for word, is what is compared)
            return None, (type(refused).__name__, str(refused))

    expected = [outcome(text) for text in expressions]
    with speedups.one_clause_count_per_update_expression():
        assert [outcome(text) for text in expressions] == expected
    assert [e[1] is None for e in expected] == [True, True, False, False, False, True]
    # The innermost node seen with two of a kind names the error: here the SET sections.
    assert [expected[2][1][1], expected[3][1][1], expected[4][1][1]] == [str(TooManyClauses(kind)) for kind in ("SET", "ADD", "SET")]


def test_handlers_are_inspected_once_and_judged_as_botocore_judges_them():
    from unittest import mock

    from botocore import hooks

    def takes_kwargs(**kwargs):
        return None

    def takes_none(event_name):
        return None

    class Handler:
        def on(self, **kwargs):
            return None

    inspected = []
    original = hooks.accepts_kwargs

    def counted(func):
        inspected.append(func)
        return original(func)

    callables = [takes_kwargs, takes_none, Handler().on, Handler().on]
    expected = [original(func) for func in callables]
    with mock.patch.object(hooks, "accepts_kwargs", counted), speedups.handlers_inspected_once():
        assert [hooks.accepts_kwargs(func) for func in callables * 2] == expected * 2
        assert len(inspected) == 3  # a bound method is its function's answer
        emitter = hooks.HierarchicalEmitter()
        emitter.register("before-send", takes_kwargs)
        try:
            emitter.register("before-send", takes_none)
        except ValueError as refused:
            assert "must accept keyword arguments" in str(refused)
        else:
            raise AssertionError("a handler without **kwargs was registered")
