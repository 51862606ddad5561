"""What a request may hold: every limit at its edge, and the words a user reads when one is crossed."""

import pytest
from pydantic import ValidationError

from gpufill import catalog
from gpufill.constants import DEFAULT_BATCH_MAX, EC2_MAX_TAGS, GPUFILL_TAG_COUNT, MAX_COUNT
from gpufill.bootstrap.user_data import render_user_data
from gpufill.models.request import Request, describe_problems, normalise, not_an_object
from gpufill.models.request_values import duration_words


def problems(request: object) -> dict[str, str]:
    """{field: problem} of a request that must be refused."""
    with pytest.raises(ValidationError) as caught:
        Request.model_validate(request)
    return {p["field"]: p["problem"] for p in describe_problems(caught.value)}


def accepted(**fields) -> Request:
    return Request.model_validate(fields)


def resolved(**fields):
    return normalise(accepted(**fields), request_id="r", default_regions=["us-east-1"], home_region="us-east-1")


# --- count and batch_max ---------------------------------------------------------------------


def test_count_runs_from_1_to_250_inclusive():
    assert (accepted(count=1).count, accepted(count=MAX_COUNT).count) == (1, 250)
    assert "greater than or equal to 1" in problems({"count": 0})["count"]
    assert "at most 250 instances per run" in problems({"count": MAX_COUNT + 1})["count"]


@pytest.mark.parametrize(
    ("fields", "batch"),
    [({"count": 3, "batch_max": 9}, 3), ({"count": 9}, DEFAULT_BATCH_MAX), ({"count": 2}, 2),
     ({"count": 9, "batch_max": 6}, 6), ({"count": 250, "batch_max": 1000}, 250)],
)
def test_batch_max_above_count_is_capped_at_count(fields, batch):
    assert resolved(**fields).batch_max == batch


def test_batch_max_must_be_at_least_one():
    assert "greater than or equal to 1" in problems({"batch_max": 0})["batch_max"]


# --- instance types --------------------------------------------------------------------------

X86_TYPES = [t for t in catalog.known_instance_types() if catalog.architecture(t) == "x86_64"]


def test_every_x86_type_in_the_catalog_is_accepted():
    assert {"g6.xlarge", "g5.xlarge", "g6e.12xlarge", "p5.48xlarge", "g4dn.xlarge"} <= set(X86_TYPES)
    for start in range(0, len(X86_TYPES), 10):
        assert accepted(instance_types=X86_TYPES[start:start + 10]).types() == X86_TYPES[start:start + 10]
    assert accepted(instance_type="g5.xlarge").types() == ["g5.xlarge"]


@pytest.mark.parametrize(("typo", "meant"), [("g6.xlarg", "g6.xlarge"), ("g5.2xlarg", "g5.2xlarge"),
                                              ("p5.48xl", "p5.48xlarge"), ("g6e.12xlarge2", "g6e.12xlarge")])
def test_a_misspelt_type_is_refused_with_the_nearest_known_one(typo, meant):
    problem = problems({"instance_types": [typo]})["instance_types"]
    assert problem == f"{typo!r} is not a GPU instance type gpufill knows: did you mean {meant!r}?"
    assert problems({"instance_type": typo})["instance_type"] == problem


def test_a_type_nothing_like_a_known_one_lists_the_families_gpufill_knows():
    problem = problems({"instance_type": "t3.micro"})["instance_type"]
    assert problem.startswith("'t3.micro' is not a GPU instance type gpufill knows: gpufill knows g6, g5, g6e")
    assert "g5g" not in problem  # arm64 families are never offered


def test_a_name_that_is_no_type_at_all_says_what_a_type_looks_like():
    assert problems({"instance_types": ["G6 XLARGE"]})["instance_types"] == (
        "'G6 XLARGE' is not an EC2 instance type name such as 'g6.xlarge'")
    assert problems({"instance_types": ["G6.XLARGE"]})["instance_types"] == (
        "'G6.XLARGE' is not an EC2 instance type name such as 'g6.xlarge'")


@pytest.mark.parametrize("arm", ["g5g.xlarge", "g5g.16xlarge", "g5g.metal"])
def test_an_arm64_type_is_refused_with_the_reason(arm):
    problem = problems({"instance_types": ["g6.xlarge", arm]})["instance_types"]
    assert problem == (f"{arm!r} is an arm64 type; gpufill's machine image and serving image are x86_64 only, "
                       "so choose an x86_64 GPU type such as 'g6.xlarge'")


def test_every_bad_type_is_named_in_one_problem():
    problem = problems({"instance_types": ["g6.xlarg", "g5g.xlarge", "g6.xlarge"]})["instance_types"]
    assert "'g6.xlarg'" in problem and "'g5g.xlarge'" in problem and "'g6.xlarge' " not in problem


def test_a_type_listed_twice_is_refused_by_name():
    assert problems({"instance_types": ["g6.xlarge", "g5.xlarge", "g6.xlarge"]})["instance_types"] == (
        "lists 'g6.xlarge' more than once")


# --- regions ---------------------------------------------------------------------------------


def test_the_users_regions_are_kept_in_order_not_replaced_by_the_defaults():
    assert resolved(regions=["us-west-2", "eu-central-1"]).regions == ["us-west-2", "eu-central-1"]
    assert resolved().regions == ["us-east-1"]


def test_a_region_listed_twice_or_unknown_is_refused_by_name():
    assert problems({"regions": ["us-west-2", "eu-west-1", "us-west-2"]})["regions"] == (
        "lists 'us-west-2' more than once")
    assert problems({"regions": ["us-west-2", "mars-1"]})["regions"] == "unknown region(s): 'mars-1'"
    assert problems({"origin_region": "moon-1"})["origin_region"] == "unknown region 'moon-1'"


# --- tags ------------------------------------------------------------------------------------


def test_tags_may_fill_what_ec2_allows_beside_gpufills_own():
    # gpufill's 4 launch tags and the startup step startup.sh adds on the running instance.
    most = EC2_MAX_TAGS - GPUFILL_TAG_COUNT
    assert (most, GPUFILL_TAG_COUNT) == (45, 5)
    assert len(accepted(tags={f"k{n}": "v" for n in range(most)}).tags) == most
    assert problems({"tags": {f"k{n}": "v" for n in range(most + 1)}})["tags"] == (
        "46 tags, at most 45: EC2 allows 50 per instance and gpufill adds 5 of its own")


def test_tag_key_and_value_lengths_follow_ec2():
    assert accepted(tags={"k" * 128: "v" * 256, "empty-value": ""}).tags["empty-value"] == ""
    assert problems({"tags": {"k" * 129: "v"}})["tags"] == (
        f"key {'k' * 40!r}… is 129 characters; a tag key has 1 to 128")
    assert problems({"tags": {"": "v"}})["tags"] == "key '' is 0 characters; a tag key has 1 to 128"
    assert problems({"tags": {"team": "v" * 257}})["tags"] == "the value of 'team' is 257 characters; at most 256"


@pytest.mark.parametrize("key", ["aws:cost", "AWS:cost", "Aws:x", "gpufill:managed", "GPUFILL:pool"])
def test_reserved_tag_prefixes_are_refused_in_any_case(key):
    assert problems({"tags": {key: "x"}})["tags"] == (
        f"key {key!r}: keys starting with 'gpufill:' or 'aws:' are reserved")


def test_tags_use_the_characters_every_aws_service_accepts():
    fine = {"cost-centre/team_a": "ml + ops = 1.0 @ eu:west", "équipe": "données 2"}
    assert accepted(tags=fine).tags == fine
    assert problems({"tags": {"cost;centre": "x"}})["tags"] == (
        "key 'cost;centre' may only hold letters, digits, spaces and + - = . _ : / @")
    assert problems({"tags": {"team": "a\nb"}})["tags"] == (
        "the value of 'team' may only hold letters, digits, spaces and + - = . _ : / @")
    assert problems({"tags": {"team": "$(whoami)"}})["tags"].startswith("the value of 'team' may only hold")


# --- model and image -------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["Qwen/Qwen2.5-Coder-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct",
                                   "a/b", "_org/model_", "org/" + "m" * 96])
def test_hugging_face_repo_ids_are_accepted(model):
    assert accepted(model_id=model).model_id == model


@pytest.mark.parametrize("model", ["Qwen2.5-Coder", "../../etc/passwd", "org/..", "org/a..b", "org/a--b",
                                   "org/-model", "org/model-", "org/.model", "org/model.", "org/a/b",
                                   "org/" + "m" * 97, "org/mo del", "org/$(id)", "/model", "org/"])
def test_model_ids_outside_hugging_faces_form_are_refused(model):
    problem = problems({"model_id": model})["model_id"]
    assert problem.endswith("is not a Hugging Face model id: give 'owner/name' such as "
                            "'Qwen/Qwen2.5-Coder-7B-Instruct' (letters, digits, '-', '_' and '.'; no '..' or '--'; "
                            "neither part starting or ending with '-' or '.'; each part at most 96 characters)")


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.10.1.1", "vllm/vllm-openai", "ubuntu",
                                   "public.ecr.aws/deep-learning/vllm:0.10-gpu",
                                   "123456789012.dkr.ecr.us-west-2.amazonaws.com/serving/vllm:latest",
                                   "localhost:5000/a__b/c-d@sha256:" + "0" * 64,
                                   "ghcr.io/org/img:v1@sha256:" + "ab" * 32])
def test_oci_image_references_are_accepted(image):
    assert accepted(image=image).image == image


@pytest.mark.parametrize("image", ["vllm/../vllm-openai", "vllm/vllm-openai:v1..2", "Vllm-Openai/Server:1",
                                   "vllm//openai", "vllm/openai:-1", "vllm/openai@sha256:abc",
                                   "vllm/openai:$(id)", "vllm/openai latest", "-vllm/openai",
                                   "vllm/openai:" + "t" * 129, "r.io/" + "a" * 300])
def test_image_references_outside_the_oci_grammar_are_refused(image):
    assert "is not a container image reference: give [registry/]path[:tag][@sha256:digest]" in (
        problems({"image": image})["image"])


def test_what_the_request_accepts_the_user_data_accepts_and_the_reverse():
    request = accepted()
    assert request.model_id in render_user_data(region="us-east-1", bucket="startup-bucket",
                                                image=request.image, model_id=request.model_id)
    with pytest.raises(ValueError, match="model_id"):
        render_user_data(region="us-east-1", bucket="startup-bucket", image=request.image, model_id="a/b..c")


# --- root volume -----------------------------------------------------------------------------


def test_root_volume_defaults_to_200_gib_and_spans_gp3s_sizes():
    assert (accepted().root_volume_gib, resolved().root_volume_gib) == (200, 200)
    assert (accepted(root_volume_gib=1).root_volume_gib, accepted(root_volume_gib=16384).root_volume_gib) == (1, 16384)
    assert problems({"root_volume_gib": 0})["root_volume_gib"] == "must be greater than or equal to 1"
    assert problems({"root_volume_gib": 16385})["root_volume_gib"] == "must be less than or equal to 16384"


# --- how problems read -----------------------------------------------------------------------


@pytest.mark.parametrize(("value", "kind"), [("g6.xlarge", "a string"), (4, "a number"), (1.5, "a number"),
                                             (None, "null"), ([], "a list"), (True, "true"), (False, "false")])
def test_a_request_that_is_not_an_object_says_what_it_got(value, kind):
    expected = {"(request)": f"the request must be a JSON object, got {kind}"}
    assert problems(value) == expected
    assert {p["field"]: p["problem"] for p in not_an_object(value)} == expected


@pytest.mark.parametrize(
    ("request_", "field", "problem"),
    [({"count": "6"}, "count", "must be a whole number, got a string"),
     ({"count": True}, "count", "must be a whole number, got true"),
     ({"count": 2.5}, "count", "must be a whole number, got a number"),
     ({"instance_types": "g6.xlarge"}, "instance_types", "must be a list, got a string"),
     ({"tags": ["team"]}, "tags", "must be a JSON object, got a list"),
     ({"tags": {"team": 7}}, "tags.team", "must be a string, got a number"),
     ({"instance_type": None, "origin_region": 5}, "origin_region", "must be a string, got a number"),
     ({"instance_types": []}, "instance_types", "must have at least 1 item, not 0"),
     ({"market": "reserved"}, "market", "must be 'spot', 'on-demand', 'spot-then-on-demand' or 'capacity-block'"),
     ({"instance_typs": ["g6.xlarge"]}, "instance_typs", "unknown field; did you mean 'instance_types'?"),
     ({"colour": "red"}, "colour", "unknown field")],
)
def test_problems_speak_json_not_python(request_, field, problem):
    found = problems(request_)
    assert found[field] == problem
    assert not [p for p in found.values() if "pydantic" in p or "Value error" in p or "Input should" in p]


def test_an_image_name_may_be_255_characters_besides_its_tag_and_digest():
    name = "r.io/" + "a" * 250
    assert accepted(image=f"{name}:v1@sha256:{'0' * 64}").image.startswith(name)
    assert "is not a container image reference" in problems({"image": name + "a:v1"})["image"]


# --- several problems in one field are all named, separated so each can be read ---------------


def test_every_problem_in_one_field_is_listed_separately():
    assert problems({"instance_types": ["g6.xlarg", "g5g.xlarge"]})["instance_types"] == (
        "'g6.xlarg' is not a GPU instance type gpufill knows: did you mean 'g6.xlarge'?; 'g5g.xlarge' is an arm64 "
        "type; gpufill's machine image and serving image are x86_64 only, so choose an x86_64 GPU type such as "
        "'g6.xlarge'")
    assert problems({"tags": {"aws:a": "x", "b": "v" * 257}})["tags"] == (
        "key 'aws:a': keys starting with 'gpufill:' or 'aws:' are reserved; "
        "the value of 'b' is 257 characters; at most 256")
    assert problems({"regions": ["us-west-2", "eu-west-1", "us-west-2", "eu-west-1"]})["regions"] == (
        "lists 'us-west-2', 'eu-west-1' more than once")


def test_a_one_character_tag_key_is_fine():
    assert accepted(tags={"a": "b"}).tags == {"a": "b"}


def test_a_bad_value_is_quoted_whole_up_to_40_characters_and_cut_after():
    assert problems({"model_id": "m" * 40})["model_id"].startswith(f"{'m' * 40!r} is not a Hugging Face model id")
    assert problems({"model_id": "m" * 41})["model_id"].startswith(f"{'m' * 40!r}… is not a Hugging Face model id")


def test_cross_field_problems_read_as_field_and_problem_pairs():
    from gpufill.models.request import RequestProblems

    error = RequestProblems([("instance_type", "give either"), ("request_id", "only goes with")])
    assert str(error) == "instance_type: give either; request_id: only goes with"


def test_length_limits_on_text_and_lists_read_as_musts():
    assert problems({"action": "teardown", "request_id": "r", "requested_by": ""})["requested_by"] == (
        "must have at least 1 character")
    assert problems({"count": {}})["count"] == "must be a whole number, got an object"


def test_teardown_and_status_combinations_say_what_goes_with_what():
    assert problems({"action": "teardown", "request_id": "run-a", "instance_ids": ["i-0123456789abcdef0"]}) == {
        "instance_ids": "a teardown names exactly one of request_id, instance_ids or all (this one names request_id, instance_ids)"}
    assert problems({"action": "teardown", "request_id": "run-a", "instance_ids": ["i-0123456789abcdef0"], "all": True}) == {
        "all": "a teardown names exactly one of request_id, instance_ids or all (this one names request_id, instance_ids, all)"}
    assert problems({"action": "teardown"}) == {
        "request_id": 'a teardown needs exactly one of request_id, instance_ids or "all": true (what to terminate)'}
    assert problems({"action": "status", "requested_by": "ana"}) == {
        "requested_by": "only goes with action 'teardown' (this request's action is 'status')"}
    assert problems({"request_id": "run-a", "instance_type": "g6.xlarge", "instance_types": ["g5.xlarge"]}) == {
        "instance_type": "give either instance_type or instance_types, not both",
        "request_id": "only goes with action 'teardown' or 'status' (this request's action is 'provision')"}


@pytest.mark.parametrize("action", ["teardown", "status"])
def test_what_to_launch_is_refused_on_a_teardown_or_status_request(action):
    target = {"request_id": "run-a"}
    found = problems({"action": action, **target, "count": 3, "market": "spot", "tags": {"team": "ml"}})
    said = f"only goes with action 'provision' or 'plan' (this request's action is {action!r})"
    assert found == {"count": said, "market": said, "tags": said}
    # The regions to search still go with them, and the same fields go with a plan.
    accepted(action=action, regions=["us-west-2"], **target)
    accepted(action="plan", count=3, market="on-demand", tags={"team": "ml"})


def test_cross_field_problems_given_directly_are_described_field_by_field():
    from gpufill.models.request import RequestProblems

    assert describe_problems(RequestProblems([("batch_max", "too big")])) == [{"field": "batch_max", "problem": "too big"}]


def test_what_each_instance_serves_is_carried_into_the_resolved_request():
    request = resolved(model_id="org/model", image="ghcr.io/org/vllm:1", root_volume_gib=500, scoring="classic")
    assert (request.model_id, request.image, request.root_volume_gib, request.scoring) == (
        "org/model", "ghcr.io/org/vllm:1", 500, "classic")


# --- list and text limits ----------------------------------------------------------------------


def test_at_most_ten_types_in_one_request():
    assert "at most 10 items" in problems({"instance_types": X86_TYPES[:11]})["instance_types"]


def test_a_teardown_names_at_most_1000_instances_and_a_request_id_of_at_most_80_characters():
    ids = [f"i-{n:017x}" for n in range(1001)]
    assert len(accepted(action="teardown", instance_ids=ids[:1000]).instance_ids) == 1000
    assert "at most 1000 items" in problems({"action": "teardown", "instance_ids": ids})["instance_ids"]
    assert accepted(action="teardown", request_id="r" * 80).request_id == "r" * 80
    assert "is not a request id" in problems({"action": "teardown", "request_id": "r" * 81})["request_id"]


def test_who_asked_for_a_teardown_is_at_most_200_characters():
    assert accepted(action="teardown", request_id="r", requested_by="a" * 200).requested_by == "a" * 200
    assert problems({"action": "teardown", "request_id": "r", "requested_by": "a" * 201})["requested_by"] == (
        "must have at most 200 characters")


def test_the_defaults_a_user_gets_without_asking():
    request = resolved()
    assert (request.action, request.on_demand_strategy, request.scoring, request.tags) == (
        "provision", "cost", "price-capacity", {})
    assert [resolved(market=m).market for m in ("spot", "on-demand", "spot-then-on-demand")] == [
        "spot", "on-demand", "spot-then-on-demand"]


# --- ready_timeout ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("PT0S", 0), ("PT1S", 1), ("PT30M", 1800), ("PT1H30M", 5400), ("PT2H", 7200), ("PT119M59S", 7199)],
)
def test_ready_timeout_is_an_iso_8601_duration_from_zero_to_two_hours(text, seconds):
    assert resolved(ready_timeout=text).ready_timeout_seconds == seconds


def test_ready_timeout_defaults_to_thirty_minutes():
    assert resolved().ready_timeout_seconds == 1800


@pytest.mark.parametrize("text", ["PT2H1S", "PT121M", "P1D"])
def test_ready_timeout_above_two_hours_is_refused(text):
    assert problems({"ready_timeout": text}) == {"ready_timeout": "must be from PT0S (do not wait) to PT2H"}


@pytest.mark.parametrize(
    ("value", "shown"),
    [(1800, "a number"), ("00:30:00", "'00:30:00'"), ("-PT1M", "'-PT1M'"), (True, "true"), ("30m", "'30m'")],
)
def test_ready_timeout_must_be_written_as_iso_8601(value, shown):
    assert problems({"ready_timeout": value}) == {
        "ready_timeout": f"must be an ISO 8601 duration such as 'PT30M' or 'PT1H30M', got {shown}"}


BLOCK = {"max_upfront_usd": 60000, "duration_hours": 24, "start_within": "P14D"}


@pytest.mark.parametrize(("request_", "field", "examples"), [
    ({"wait_for_capacity": {"deadline": 3600}}, "wait_for_capacity.deadline", "'PT6H' or 'P2D'"),
    ({"wait_for_capacity": {"deadline": "PT6H", "first_delay": None}}, "wait_for_capacity.first_delay", "'PT6H' or 'P2D'"),
    ({"capacity_block": {**BLOCK, "start_within": 86400}}, "capacity_block.start_within", "'P14D' or 'P2W'"),
    ({"max_lifetime": 28800}, "max_lifetime", "'PT8H' or 'P2D'"),
])
def test_every_duration_field_takes_iso_8601_alone_and_names_its_examples(request_, field, examples):
    shown = "null" if "first_delay" in field else "a number"
    assert problems(request_) == {field: f"must be an ISO 8601 duration such as {examples}, got {shown}"}


def test_the_optional_durations_of_the_request_take_null_as_unset():
    assert accepted(ready_timeout=None, max_lifetime=None).ready_timeout is None

def test_ready_timeout_that_is_not_a_duration_at_all_is_named():
    assert problems({"ready_timeout": "PTX"}) == {"ready_timeout": "must be an ISO 8601 duration such as 'PT30M', got a string"}


def test_ready_timeout_takes_whole_seconds():
    assert problems({"ready_timeout": "PT0.5S"}) == {
        "ready_timeout": "give whole seconds (the run checks the model servers once a minute)"}


@pytest.mark.parametrize("action", ["plan", "status"])
def test_ready_timeout_only_goes_with_a_provisioning_run(action):
    assert problems({"action": action, "ready_timeout": "PT5M"}) == {
        "ready_timeout": f"only goes with action 'provision' (this request's action is {action!r})"}


def test_a_gpu_named_where_an_instance_type_goes_lists_the_types_gpufill_can_run_that_carry_it():
    assert problems({"instance_type": "A100"}) == {"instance_type": (
        "'A100' is a GPU, not an instance type; the types that carry it (GPUs each): p4d.24xlarge (8), p4de.24xlarge (8)")}
    # g5g's T4G runs on arm64 alone, which gpufill's images do not: no carrier to offer.
    assert problems({"instance_type": "T4G"}) == {"instance_type": "'T4G' is not an EC2 instance type name such as 'g6.xlarge'"}


@pytest.mark.parametrize(("seconds", "words"), [
    (59, "59 seconds"), (60, "1 minutes"), (90, "1.5 minutes"), (3600, "1 hours"), (5400, "1.5 hours"),
    (86399, "23.9997 hours"), (86400, "1 days"), (3 * 86400, "3 days"),
])
def test_a_duration_in_a_problem_is_said_in_its_largest_unit(seconds, words):
    assert duration_words(seconds) == words


def test_the_spend_guard_fields_resolve_as_given():
    assert resolved(max_lifetime="PT8H").max_lifetime_seconds == 28800
    assert resolved().max_lifetime_seconds is None
    assert resolved(action="teardown", request_id="r1", trigger="max_lifetime").trigger == "max_lifetime"


@pytest.mark.parametrize(("request_", "field", "actions"), [
    ({"action": "status", "wait_for_capacity": {"deadline": "PT1H"}}, "wait_for_capacity", "'provision'"),
    ({"action": "plan", "max_lifetime": "PT8H"}, "max_lifetime", "'provision'"),
    ({"action": "plan", "maintain": True}, "maintain", "'provision'"),
    ({"action": "provision", "trigger": "max_lifetime"}, "trigger", "'teardown'"),
])
def test_an_option_of_another_action_is_named_with_the_action_it_goes_with(request_, field, actions):
    assert problems(request_) == {field: f"only goes with action {actions} (this request's action is {request_['action']!r})"}


def test_a_plan_is_held_to_the_capacity_block_rules_as_a_provisioning_run_is():
    assert problems({"action": "plan", "market": "capacity-block"}) == {
        "capacity_block": 'market "capacity-block" needs capacity_block: {"max_upfront_usd", "duration_hours", "start_within"}'}


@pytest.mark.parametrize(("options", "problem"), [
    ({"capacity_reservations": "only"}, '"capacity_reservations": "only" launches into reservations alone; drop one or the other'),
    ({"maintain": True}, "does not go with maintain yet: a refill would run outside the block"),
    ({"placement": "same-az"}, "does not go with a gang (placement other than 'any', or all_or_nothing) yet"),
    ({"all_or_nothing": True}, "does not go with a gang (placement other than 'any', or all_or_nothing) yet"),
])
def test_a_capacity_block_refuses_the_options_it_does_not_go_with(options, problem):
    assert problems({"capacity_block": BLOCK, **options}) == {"capacity_block": problem}
